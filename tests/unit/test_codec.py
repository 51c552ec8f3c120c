"""The default codec: Python values to stored JSON and back, by the receiver's type hints."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from decimal import Decimal
from typing import Annotated, Any, Literal

import pydantic
import pytest
from hypothesis import given, strategies as st

import waypost as wp
from waypost.model.codec import Codec, JsonCodec, error_to_json
from waypost.model.events import canonical_json

codec = JsonCodec()


def roundtrip(value: Any, hint: Any) -> Any:
    """Encode, store as canonical JSON text, read back and decode with `hint`."""
    stored = canonical_json(codec.encode(value))
    return codec.decode(json.loads(stored), hint)


# -- types used below (module level, so that their hints resolve) -----------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Size(enum.IntEnum):
    S = 1
    M = 2


class Mood(enum.StrEnum):
    HAPPY = "happy"
    SAD = "sad"


@dataclasses.dataclass
class Item:
    sku: str
    qty: int
    price: Decimal = Decimal("0")
    color: Color | None = None


@dataclasses.dataclass
class Address:
    street: str
    city: str


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    items: list[Item]
    placed_at: dt.datetime
    ship_to: Address | None = None
    tags: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    sizes: dict[str, Size] = dataclasses.field(default_factory=dict)
    note: str | None = None
    due: dt.date | None = None


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float


class Customer(pydantic.BaseModel):
    name: str
    email: str
    since: dt.datetime
    tier: Mood = Mood.HAPPY


class Invoice(pydantic.BaseModel):
    customer: Customer
    lines: list[int]
    total: Decimal


@dataclasses.dataclass
class Envelope:
    invoice: Invoice
    points: list[Point]


# -- JSON values pass through unchanged ----------------------------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=40,
)


@given(JSON_VALUES)
def test_json_values_round_trip_unchanged(value: Any) -> None:
    encoded = codec.encode(value)
    assert encoded == value
    assert canonical_json(encoded) == canonical_json(value)
    assert codec.decode(encoded) == value
    assert codec.decode(json.loads(canonical_json(encoded)), Any) == value


def test_the_default_codec_satisfies_the_protocol() -> None:
    assert isinstance(codec, Codec)
    assert isinstance(wp.JsonCodec(), wp.Codec)


def test_tuples_encode_as_lists_and_come_back_as_tuples() -> None:
    assert codec.encode((1, "a", (2, 3))) == [1, "a", [2, 3]]
    assert roundtrip((1, "a"), tuple[int, str]) == (1, "a")
    assert roundtrip((1, 2, 3), tuple[int, ...]) == (1, 2, 3)
    assert roundtrip([1, 2], tuple) == (1, 2)


def test_a_fixed_length_tuple_hint_refuses_a_list_of_another_length() -> None:
    with pytest.raises(wp.PayloadError, match=r"value"):
        codec.decode([1, "a", "extra"], tuple[int, str])
    with pytest.raises(wp.PayloadError, match=r"value"):
        codec.decode([1], tuple[int, str])


# -- Python types -------------------------------------------------------------------


def test_nested_dataclasses_round_trip() -> None:
    order = Order(
        id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        items=[
            Item("a", 2, Decimal("9.99"), Color.RED),
            Item("b", 1),
        ],
        placed_at=dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC),
        ship_to=Address("Main St 1", "Springfield"),
        tags={"gift": ["wrap", "card"], "none": []},
        sizes={"a": Size.M},
        due=dt.date(2024, 5, 3),
    )
    encoded = codec.encode(order)
    assert encoded == {
        "id": "12345678-1234-5678-1234-567812345678",
        "items": [
            {"sku": "a", "qty": 2, "price": "9.99", "color": "red"},
            {"sku": "b", "qty": 1, "price": "0", "color": None},
        ],
        "placed_at": "2024-05-01T12:30:15.123456+00:00",
        "ship_to": {"street": "Main St 1", "city": "Springfield"},
        "tags": {"gift": ["wrap", "card"], "none": []},
        "sizes": {"a": 2},
        "note": None,
        "due": "2024-05-03",
    }
    back = roundtrip(order, Order)
    assert back == order
    assert isinstance(back.items[0], Item)
    assert back.items[0].color is Color.RED
    assert isinstance(back.items[0].price, Decimal)
    assert isinstance(back.ship_to, Address)
    assert back.sizes["a"] is Size.M
    assert back.placed_at.tzinfo is not None


def test_optional_dataclass_fields_come_back_as_none() -> None:
    order = Order(uuid.uuid4(), [], dt.datetime(2024, 1, 1))
    back = roundtrip(order, Order)
    assert back == order
    assert back.ship_to is None
    assert back.due is None


def test_missing_fields_with_defaults_take_the_default() -> None:
    back = codec.decode({"sku": "x", "qty": 1}, Item)
    assert back == Item("x", 1)


def test_list_and_dict_hints_rebuild_their_items() -> None:
    items = [Item("a", 1), Item("b", 2)]
    assert roundtrip(items, list[Item]) == items
    by_name = {"p": Point(1.0, 2.5), "q": Point(-1, 0)}
    back = roundtrip(by_name, dict[str, Point])
    assert back == by_name
    assert all(isinstance(p, Point) for p in back.values())
    assert roundtrip([[Point(0, 1)]], list[list[Point]]) == [[Point(0, 1)]]


def test_set_hints_rebuild_sets_from_lists() -> None:
    assert codec.decode([3, 1, 2], set[int]) == {1, 2, 3}
    assert codec.decode(["a"], frozenset[str]) == frozenset({"a"})


def test_pydantic_models_round_trip() -> None:
    invoice = Invoice(
        customer=Customer(
            name="Ada",
            email="ada@example.com",
            since=dt.datetime(2020, 2, 29, 8, 0, tzinfo=dt.UTC),
            tier=Mood.SAD,
        ),
        lines=[1, 2, 3],
        total=Decimal("12.50"),
    )
    encoded = codec.encode(invoice)
    assert encoded["customer"]["tier"] == "sad"
    assert json.loads(canonical_json(encoded)) == encoded
    back = roundtrip(invoice, Invoice)
    assert back == invoice
    assert isinstance(back.customer, Customer)


def test_pydantic_models_inside_dataclasses_round_trip() -> None:
    env = Envelope(
        invoice=Invoice(
            customer=Customer(name="B", email="b@x", since=dt.datetime(2021, 1, 1)),
            lines=[],
            total=Decimal("0.01"),
        ),
        points=[Point(0.5, 0.25)],
    )
    back = roundtrip(env, Envelope)
    assert back == env
    assert isinstance(back.invoice, Invoice)


def test_pydantic_validation_errors_name_the_path() -> None:
    with pytest.raises(wp.PayloadError, match=r"value\.invoice cannot be read as Invoice"):
        codec.decode({"invoice": {"customer": "nope"}, "points": []}, Envelope)


@pytest.mark.parametrize(
    ("value", "hint", "encoded"),
    [
        (Color.GREEN, Color, "green"),
        (Size.M, Size, 2),
        (Mood.HAPPY, Mood, "happy"),
        (dt.datetime(2024, 2, 29, 23, 59, 59), dt.datetime, "2024-02-29T23:59:59"),
        (
            dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            dt.datetime,
            "2024-02-29T23:59:59-05:00",
        ),
        (dt.date(1999, 12, 31), dt.date, "1999-12-31"),
        (dt.time(7, 5, 3, 1000), dt.time, "07:05:03.001000"),
        (
            uuid.UUID("00000000-0000-4000-8000-000000000001"),
            uuid.UUID,
            "00000000-0000-4000-8000-000000000001",
        ),
        (Decimal("1.10"), Decimal, "1.10"),
        (Decimal("-12345678901234567890.123456789"), Decimal, "-12345678901234567890.123456789"),
        (Decimal("1E+3"), Decimal, "1E+3"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str | int) else None,
)
def test_scalar_types_round_trip(value: Any, hint: Any, encoded: Any) -> None:
    assert codec.encode(value) == encoded
    back = roundtrip(value, hint)
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, Decimal):
        assert str(back) == str(value)  # the exact digits, not just an equal number
    if isinstance(value, dt.datetime):
        assert back.utcoffset() == value.utcoffset()


def test_enum_dict_keys_encode_to_their_values() -> None:
    assert codec.encode({Color.RED: 1, Mood.SAD: 2}) == {"red": 1, "sad": 2}


def test_enum_dict_keys_round_trip() -> None:
    back = roundtrip({Color.RED: 1, Color.GREEN: 2}, dict[Color, int])
    assert back == {Color.RED: 1, Color.GREEN: 2}
    assert all(isinstance(k, Color) for k in back)


@given(
    st.builds(
        Item,
        sku=st.text(),
        qty=st.integers(),
        price=st.decimals(allow_nan=False, allow_infinity=False),
        color=st.none() | st.sampled_from(Color),
    )
)
def test_any_item_round_trips(item: Item) -> None:
    back = roundtrip(item, Item)
    assert back == item
    assert str(back.price) == str(item.price)


FIXED_OFFSETS = st.builds(
    dt.timezone,
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
        lambda m: dt.timedelta(minutes=m)
    ),
)


# Fixed offsets: a zone name (zoneinfo) is not kept, only the offset, and inter-zone
# comparisons of ambiguous local times are unequal by definition (PEP 495).
@given(st.datetimes(timezones=st.none() | FIXED_OFFSETS), st.uuids())
def test_any_datetime_and_uuid_round_trip(when: dt.datetime, ident: uuid.UUID) -> None:
    back = roundtrip({"when": when, "id": ident}, dict[str, dt.datetime | uuid.UUID])
    assert back["id"] == ident
    assert back["when"] == when
    assert back["when"].utcoffset() == when.utcoffset()


def test_union_hints_try_each_member() -> None:
    assert codec.decode(3, int | str) == 3
    assert codec.decode("x", int | str) == "x"
    assert codec.decode(None, Item | None) is None
    assert codec.decode({"sku": "a", "qty": 1}, Item | None) == Item("a", 1)
    with pytest.raises(wp.PayloadError, match="matches none of"):
        codec.decode([1], int | str)


def test_literal_and_annotated_hints() -> None:
    assert codec.decode("b", Literal["a", "b"]) == "b"
    with pytest.raises(wp.PayloadError, match=r"value is 'c', expected one of"):
        codec.decode("c", Literal["a", "b"])
    assert codec.decode("2024-01-02", Annotated[dt.date, "doc"]) == dt.date(2024, 1, 2)


def test_float_hints_accept_ints_and_ints_refuse_bools_and_floats() -> None:
    back = codec.decode(2, float)
    assert back == 2.0
    assert type(back) is float
    with pytest.raises(wp.PayloadError, match="value should be int, got bool"):
        codec.decode(True, int)
    with pytest.raises(wp.PayloadError, match="value should be int, got float"):
        codec.decode(1.5, int)
    with pytest.raises(wp.PayloadError, match="value should be str, got int"):
        codec.decode(1, str)


@pytest.mark.parametrize("data", ["1.5", True])
def test_float_hints_refuse_what_is_not_a_number(data: Any) -> None:
    with pytest.raises(wp.PayloadError, match=r"value\['b'\]\.x should be float"):
        codec.decode({"a": {"x": 1, "y": 2}, "b": {"x": data, "y": 2}}, dict[str, Point])


# -- errors name the bad part -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path", "what"),
    [
        ({"items": [1, 2, {3}]}, "value['items'][2]", "set"),
        ({"items": [1, 2, frozenset()]}, "value['items'][2]", "frozenset"),
        ({"blob": complex(1, 2)}, "value['blob']", "complex"),
        ([0, [1, range(3)]], "value[1][1]", "range"),
        ({"a": {"b": object()}}, "value['a']['b']", "object"),
    ],
)
def test_unsupported_types_are_refused_naming_their_path(value: Any, path: str, what: str) -> None:
    with pytest.raises(wp.PayloadError) as err:
        codec.encode(value)
    message = str(err.value)
    assert message.startswith(f"{path} is of type ")
    assert what in message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_naming_their_path(bad: float) -> None:
    with pytest.raises(wp.PayloadError) as err:
        codec.encode({"prices": [1.0, bad]})
    assert str(err.value).startswith("value['prices'][1] is ")
    assert "JSON cannot hold" in str(err.value)


@pytest.mark.parametrize("key", [1, 2.5, None, (1, 2), Size.S])
def test_non_string_keys_are_refused_naming_their_path(key: Any) -> None:
    with pytest.raises(wp.PayloadError) as err:
        codec.encode({"outer": [{"ok": 1}, {key: "v"}]})
    message = str(err.value)
    assert message.startswith("value['outer'][1] has a key ")
    assert "keys must be strings" in message


def test_errors_inside_dataclasses_name_the_field_path() -> None:
    order = Order(uuid.uuid4(), [Item("a", 1), Item("b", 2, color={"x"})], dt.datetime(2024, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(
        wp.PayloadError, match=r"^value\.items\[1\]\.color is of type builtins\.set"
    ):
        codec.encode(order)


def test_decode_errors_name_the_path() -> None:
    data = {
        "id": str(uuid.uuid4()),
        "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "two"}],
        "placed_at": "2024-01-01T00:00:00",
    }
    with pytest.raises(wp.PayloadError, match=r"value\.items\[1\]\.qty should be int, got str"):
        codec.decode(data, Order)
    with pytest.raises(wp.PayloadError, match=r"value\['b'\]\.qty should be int, got list"):
        codec.decode({"a": {"sku": "a", "qty": 1}, "b": {"sku": "b", "qty": []}}, dict[str, Item])
    with pytest.raises(wp.PayloadError, match=r"value\.items should be a list, got dict"):
        codec.decode({**data, "items": {}}, Order)
    with pytest.raises(wp.PayloadError, match=r"value should be an object for Item, got list"):
        codec.decode([], Item)
    with pytest.raises(wp.PayloadError, match=r"value cannot be read as Item"):
        codec.decode({"sku": "only"}, Item)
    with pytest.raises(wp.PayloadError, match=r"value\[0\]: 'blue' is not a valid Color"):
        codec.decode(["blue"], list[Color])


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        ("not-a-uuid", uuid.UUID),
        ("yesterday", dt.datetime),
        ("31/12/1999", dt.date),
        ("noon", dt.time),
        ("twelve", Decimal),
        (5, uuid.UUID),
        (5, dt.datetime),
    ],
    ids=["uuid", "datetime", "date", "time", "decimal", "uuid-int", "datetime-int"],
)
def test_malformed_scalars_raise_payload_errors_naming_the_path(data: Any, hint: Any) -> None:
    with pytest.raises(wp.PayloadError, match=r"value\['when'\]\[0\]"):
        codec.decode({"when": [data]}, dict[str, list[hint]])  # type: ignore[valid-type]


def test_error_to_json_keeps_type_module_message_and_traceback() -> None:
    assert error_to_json(ValueError("bad")) == {
        "type": "ValueError",
        "module": "builtins",
        "message": "bad",
    }
    out = error_to_json(wp.PayloadError("p"), traceback_text="Traceback ...")
    assert out["module"] == "waypost.errors"
    assert out["traceback"] == "Traceback ..."


def test_bytes_are_stored_as_base64_text_and_read_back_by_their_hint() -> None:
    codec = JsonCodec()
    data = codec.encode({"raw": b"\x00\xffpdf", "more": [bytearray(b"x"), memoryview(b"yz")]})
    assert data == {"raw": "AP9wZGY=", "more": ["eA==", "eXo="]}
    assert codec.decode(data["raw"], bytes) == b"\x00\xffpdf"
    assert codec.decode(data["more"], list[bytearray]) == [bytearray(b"x"), bytearray(b"yz")]
    assert codec.decode(data["raw"]) == "AP9wZGY="  # no hint: the text, as for datetimes
    with pytest.raises(wp.PayloadError, match="not valid base64"):
        codec.decode("not base64!", bytes)
    with pytest.raises(wp.PayloadError, match="should be base64 text, got int"):
        codec.decode(3, bytes)


def test_an_error_keeps_the_chain_of_errors_it_came_from() -> None:
    def fails() -> None:
        try:
            try:
                raise ConnectionError("reset by peer")
            except ConnectionError as low:
                raise TimeoutError("no answer") from low
        except TimeoutError:
            raise RuntimeError("charge failed")  # noqa: B904 (raised while handling)

    with pytest.raises(RuntimeError) as caught:
        fails()
    error = error_to_json(caught.value, causes=True)
    assert error["message"] == "charge failed"
    assert error["cause"]["type"] == "TimeoutError"
    assert error["cause"]["cause"] == {
        "type": "ConnectionError",
        "module": "builtins",
        "message": "reset by peer",
    }
    assert "cause" not in error_to_json(caught.value)  # only where asked for
    hidden = RuntimeError("hidden")
    hidden.__context__, hidden.__suppress_context__ = ValueError("x"), True  # `from None`
    assert "cause" not in error_to_json(hidden, causes=True)
    looped = ValueError("a")
    looped.__cause__ = KeyError("b")
    looped.__cause__.__cause__ = looped  # a cycle ends the chain
    assert error_to_json(looped, causes=True)["cause"] == {
        "type": "KeyError",
        "module": "builtins",
        "message": "'b'",
    }

"""Workflows defined as data: the format, its JSON Schema, validation and digest.

A definition is YAML or JSON with the same structure (`definition_schema()`
gives the JSON Schema, Draft 2020-12). Top level:

    name         the workflow's name (1-200 letters, digits, '_', '-', '.', ':')
    description  optional text
    input        optional JSON Schema that a run's input must satisfy
    start        id of the first step
    steps        step id -> step (ids: a letter or '_', then letters, digits, '_', '-')
    timeout      optional total duration of a run
    on_cancel    `compensate`: a cancelled run first compensates its completed steps,
                 newest first (a step must have a `compensate`); `none` (default): not

Durations are ISO-8601 with weeks, days, hours, minutes and seconds ("P3D",
"PT30M", "P1DT12H", "PT0.5S") or a number of seconds. Expressions are
JMESPath over the run's data (its input plus what steps stored in it), see
`expressions`. A mapping is an object of name -> expression, where
`{literal: value}` stands for a constant. An output location is `$.name` or
`$.name.field`. Every step has a `type` and an optional `description`; a step
without `next` ends its run (or its parallel branch) successfully.

    activity   `activity: <registered name>` or `http: {url, method (GET, POST,
               PUT, PATCH, DELETE), headers (name -> text, or {secret: <tenant
               secret name>, format: "Bearer {}"}), body (mapping),
               signature: {secret: <tenant secret name>, header}}`; `input`
               (mapping), `output` (location), `retry: {max_attempts,
               initial_interval, backoff, max_interval}`, `timeout`,
               `compensate` (an activity name, or `{activity, input}`),
               `skippable` (an operator, not only an admin, may skip it), `next`.
    approval   `approvers: {users: [...], groups: [...], quorum: N, all: bool,
               veto: bool}`, `input` (mapping: what approvers are shown),
               `output` (location of the decision), `expires_in`, `on_reject`,
               `on_expiry`, `next`. Without `on_reject` (or `on_expiry`) a
               rejection (or expiry) fails the run.
    wait       exactly one of `duration`, `until` (expression giving an ISO-8601
               date-time) or `signal` (name); `output` (location of the
               signal's payload), `timeout`, `on_timeout` (else a timeout
               fails the run), `next`; with `signal`, `correlate: {key: name,
               value: expression}` (a string or whole number from the data)
               makes the run findable by webhooks while it waits.
    choice     `choices: [{when: expression, next: step}, ...]` (the first that
               holds wins), `default: step`, `max_iterations` (a run passing
               the choice more often fails; this is what bounds a loop).
    parallel   `branches: [{start, steps}, ...]`, each a sub-graph whose steps
               go only to steps of the same branch; joined when all end; `next`.
    map        `items` (expression giving an array), `iterator: {start, steps}`
               walked once per item on a copy of the data with `item` and
               `index` added; `max_items`, `concurrency`, `tolerate` (failed
               items allowed), `output` (the items' results, in item order),
               `next`. An item's result is its `succeed` step's output, else
               an object of what its steps stored.
    pass       `set: {location: expression or {literal: value}, ...}`, `next`.
    succeed    `output` (expression giving the run's result; all data if absent).
    fail       `error` (a name), `message`.

`activity`, `approval`, `wait`, `parallel`, `map`, `pass` and `call` steps may
have `catch: [{errors: [names] or ["*"], next: step, output: location}]`:
a failure the first matching rule names (the interpreter's error name or the
activity's own error type) stores `{error, type, message, step}` at `output`
(`$.error`) and goes on at `next`, without compensating. `activity`, `approval`,
`wait` (for a signal), `map` and `call` steps may have `result` (expression
or mapping over the raw result) selecting what is stored at `output`.

Static validation checks the schema, step targets, reachability, loops (each
needs a bound), activity names, expressions, durations and a tenant's
`Limits`; `validate` explains the rules. The modules: `format` (the records,
schema, digest and durations), `reading` (text to structure, schema errors),
`validate` (static checks, canonical form, `parse_definition`), `expressions`
(JMESPath over a run's data, within a `Budget`), `inputs` (input schemas and
checking a run's input) and `migration` (moving a waiting run to another
version). Objects and arrays nest at most `MAX_NESTING` (64) levels, in a
definition and in a run's input.
"""

from __future__ import annotations

from waypost.model.definitions.expressions import (
    Expression,
    ExpressionError,
    compile_expression,
)
from waypost.model.definitions.format import (
    Definition,
    DefinitionError,
    InputError,
    Limits,
    Problem,
    canonical_digest,
    definition_schema,
    parse_duration,
)
from waypost.model.definitions.validate import input_problems, parse_definition

__all__ = [
    "Definition",
    "DefinitionError",
    "Expression",
    "ExpressionError",
    "InputError",
    "Limits",
    "Problem",
    "canonical_digest",
    "compile_expression",
    "definition_schema",
    "input_problems",
    "parse_definition",
    "parse_duration",
]

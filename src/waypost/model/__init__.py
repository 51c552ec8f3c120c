"""The pure model: events, statuses, retry policy, the codec. No I/O here."""

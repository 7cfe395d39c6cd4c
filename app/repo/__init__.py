"""Repository layer: the schema and every SQL statement the service sends.

Each verb has one named query (a constant leading comment ``/* sibyl:<verb> */``), every value is
bound as a parameter (arrays, never IN-lists built from input), and the reader's authorization is
the single fragment in :mod:`app.repo.readrule`.
"""

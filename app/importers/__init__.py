"""Importers: turn outside data into the NDJSON import records of contract §9.

- ``app.importers.ndjson``: bulk import of §9 records into the database.
- ``app.importers.peps``: pure-Python conversion of the PEP corpus into §9 records (no database).
"""

"""REST adapter (FastAPI): routes translate HTTP to domain calls and domain errors to HTTP."""

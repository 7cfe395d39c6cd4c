"""The background workers a serving process runs: the search word statistics, the communities
and the semantic lane's vectors, each on the shared tick loop of :mod:`app.service.workers.tick`.
"""

"""The read side of the informers' Redis mirror: what tasks use instead of calling the API server.

Tasks read here and write only the API server; their writes come back through the informer's watch.
"""

from mcm_tasks.cache.listers import Lister, Listers, get_listers, new_listers
from mcm_tasks.cache.reader import CacheReader, get_reader

__all__ = ["CacheReader", "Lister", "Listers", "get_listers", "get_reader", "new_listers"]

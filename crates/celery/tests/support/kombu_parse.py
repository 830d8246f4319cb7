"""Prints, for each URL given, what kombu 5.5 itself makes of it, as one JSON line:
the transport, host, port, user, password and virtual host kombu's Connection ends
up with, and for Redis the database number its Redis channel would select.
"""
import json
import sys

from kombu import Connection
from kombu.transport.redis import Channel

for url in sys.argv[1:]:
    c = Connection(url)
    out = {
        "transport": c.transport_cls,
        "hostname": c.hostname,
        "port": c.port,
        "userid": c.userid,
        "password": c.password,
        "virtual_host": c.virtual_host,
    }
    if c.transport_cls in ("redis", "rediss"):
        out["db"] = Channel._prepare_virtual_host(None, c.virtual_host)
    print(json.dumps(out))

"""Real object-store servers on 127.0.0.1 for the tests: S3, GCS, Azure Blob and static HTTP.

Each starts on a random port, records every request it answers in a
:class:`~loopback.log.RequestLog` (and injects its faults); :mod:`loopback.services` puts them
behind one interface so that one test matrix runs against all four.
"""

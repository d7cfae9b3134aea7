"""The protocol in a team's own service: the same deliveries, answers and log lines as the
kit's function, around a handler the team already has (docs/own-service.md).

guard.py               ServiceGuard: the DEDUP_* settings, one Firestore client, one
                       protocol per process; a guarded job's delivery answered (no framework)
wsgi.py                a Flask view decorator, and a wrapper for any WSGI app
asgi.py                middleware for any ASGI app (FastAPI, Starlette): the protocol's
                       blocking calls off the event loop
functions_framework.py a decorator for a functions-framework HTTP function
"""

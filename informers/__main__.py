"""``python -m informers``: the informer command on its own (same as ``mcm-tasks informer``)."""

from informers.cli import app

app()

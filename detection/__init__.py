"""loopboard's detection engine: plain Python, no Django, Celery or `runs` import."""

from .model import KINDS, Run, Step

__all__ = ["KINDS", "Run", "Step"]

"""Fixtures for the API tests: keys for alice's project and for a project she is not in."""

from __future__ import annotations

import pytest

from runs.models import ApiKey


@pytest.fixture
def key(project) -> str:
    """A plain API key of alice's project."""
    return ApiKey.issue(project, "tests")[1]


@pytest.fixture
def other_key(other_project) -> str:
    return ApiKey.issue(other_project, "theirs")[1]


@pytest.fixture
def api(client, key):
    """A test client that sends alice's project key."""
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return client

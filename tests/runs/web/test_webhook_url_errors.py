"""Issue 25, "What breaks" 5: saving a webhook URL with a bad port or bracket answered 500.
The API's POST is tested in tests/runs/api/test_no_server_errors.py; here the settings
page's form and the API's PATCH of an existing channel."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from runs.models import Channel
from runs.services import channels

pytestmark = pytest.mark.django_db

BAD_URLS = [
    "http://example.com:99999/x",
    "http://example.com:port/x",
    "http://[::1/x",
    "http://[zz]/x",
    "http://ex]ample.com/x",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_saving_a_webhook_url_with_a_bad_port_or_bracket_on_the_page_is_refused_not_a_500(
    client_in, project, url
):
    data = {"channel-name": "ops", "channel-kind": "webhook", "channel-url": url}
    response = client_in.post(reverse("runs:alert_channel_create", args=[project.slug]), data)
    assert response.status_code == 302, response.status_code
    page = client_in.get(response.url).content.decode()
    assert "Channel not added" in page
    assert not Channel.objects.exists()


@pytest.mark.parametrize("url", BAD_URLS)
def test_patching_a_webhook_url_to_a_bad_port_or_bracket_is_a_422(api, project, settings, url):
    settings.LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = True
    channel, _ = channels.create_channel(
        project, channels.ChannelData(name="ops", kind="webhook", url="http://127.0.0.1:9/x")
    )
    response = api.patch(
        f"/api/channels/{channel.pk}", json.dumps({"url": url}), content_type="application/json"
    )
    assert response.status_code == 422, response.content
    assert "URL" in response.json()["detail"]
    assert channels.url_of(Channel.objects.get(pk=channel.pk)) == "http://127.0.0.1:9/x"

"""protocols/chat_request.py: the depth check reads the whole body at once and names the field only when it
fails, with the same limit as a check of each field."""

from __future__ import annotations

import orjson
import pytest

from sanctum_proxy.errors import InvalidRequest
from sanctum_proxy.protocols.chat_request import DEPTH_HEADROOM, check_depth


def nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


def writable_per_field(value: object) -> bool:
    """The rule as it was: the field, DEPTH_HEADROOM levels further down, can be written."""
    for _ in range(DEPTH_HEADROOM):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


@pytest.mark.parametrize("depth", range(230, 245))
def test_the_whole_body_check_has_each_fields_limit(depth: int) -> None:
    body = {"model": "m", "messages": [], "metadata": nested(depth)}
    if writable_per_field(body["metadata"]):
        check_depth(body)
    else:
        with pytest.raises(InvalidRequest) as caught:
            check_depth(body)
        assert caught.value.param == "metadata"

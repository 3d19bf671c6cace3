"""Tools the tests offer the model, defined once."""

from __future__ import annotations

from typing import Any

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER: dict[str, Any] = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
WEATHER_DESCRIBED: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city", "parameters": CITY}}

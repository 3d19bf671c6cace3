"""The client protocols served, one registration each."""

from __future__ import annotations

from sanctum_proxy.routes import chat, ollama, translated
from sanctum_proxy.web.client_protocols import ProtocolTable

PROTOCOLS = ProtocolTable([chat.PROTOCOL, translated.RESPONSES_PROTOCOL, translated.MESSAGES_PROTOCOL,
                           ollama.PROTOCOL])

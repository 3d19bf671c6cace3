# syntax=docker/dockerfile:1
# sanctum-proxy: build wheels in one stage, install them into a slim runtime as a non-root user.
# Configure with SANCTUM_<SETTING> env vars, or mount a TOML file and point SANCTUM_CONFIG at it.
# BASE: any Debian-like image with python >= 3.11, pip and useradd (tests/deploy builds on a locally made one).
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sanctum_proxy ./sanctum_proxy
# The [redis] extra: replicas share auto-mode decisions and limits when SANCTUM_REDIS_URL is set. The [otel] extra:
# spans go to OTEL_EXPORTER_OTLP_ENDPOINT when it is set, and nothing is traced without it.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[redis,otel]"

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 10001 --user-group sanctum \
    && mkdir -p /data /etc/sanctum-proxy && chown 10001:10001 /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
USER 10001:10001
WORKDIR /home/sanctum
ENV SANCTUM_HOST=0.0.0.0 SANCTUM_PORT=8100 SANCTUM_UPSTREAM=http://ollama:11434/v1 \
    SANCTUM_TRACES_PATH=/data/traces.sqlite3
EXPOSE 8100
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SANCTUM_PORT', '8100'), timeout=2)"]
ENTRYPOINT ["sanctum-proxy"]

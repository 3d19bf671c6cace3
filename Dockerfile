# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sanctum_proxy ./sanctum_proxy
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 sanctum
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER sanctum
ENV SANCTUM_HOST=0.0.0.0 SANCTUM_PORT=8100 SANCTUM_UPSTREAM=http://ollama:11434/v1
EXPOSE 8100
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8100/healthz', timeout=2)" || exit 1
ENTRYPOINT ["sanctum-proxy"]

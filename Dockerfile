# One image for the API, the Ray head and the Ray workers, so every node runs the same code,
# the same Ray and the same Python. The base image and every Python package are pinned to the
# versions the test suite ran with (constraints.txt names the base image its pins are for).
# The `embedded` extra (SecantusDB, GPL-2.0-only) is never installed here: the image uses MongoDB.
FROM python:3.11.7-slim-bookworm
WORKDIR /app
COPY constraints.txt pyproject.toml README.md LICENSE ./
COPY svc ./svc
COPY api ./api
COPY actors ./actors
COPY plugins ./plugins
COPY config ./config
RUN pip install --no-cache-dir -c constraints.txt .
# Every process (the API, the Ray nodes, their actors) runs as an unprivileged user of its own;
# /data (the API's volume) is its.
RUN useradd --create-home --uid 10001 --user-group svc && mkdir -p /data && chown svc:svc /data
USER 10001:10001
ENV SVC_DATA_DIR=/data
EXPOSE 8080
CMD ["svc", "serve", "--host", "0.0.0.0", "--port", "8080"]

# The API image (also used for the Ray head, so both run the same code and Ray version).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY svc ./svc
COPY api ./api
COPY actors ./actors
COPY plugins ./plugins
COPY config ./config
RUN pip install --no-cache-dir . "ray[default,client]"
ENV SVC_DATA_DIR=/data
EXPOSE 8080
CMD ["svc", "serve", "--host", "0.0.0.0", "--port", "8080"]

# One image for every process of mcm-tasks: `mcm-tasks informer|worker|beat|admin`, and Flower
# (`celery -A mcm_tasks.celery_app flower`). The chart and compose/compose.yaml pick the command.
#
# Built from the dependency set `make install` uses: the same pip, the same constraints.txt, the
# runtime extras only (tests/test_image.py checks they agree). The build stage has the compilers an
# sdist may need; the final stage gets the finished virtualenv and nothing else.
#
#   docker build -t mcm-tasks .                          # what the chart runs
#   docker build --build-arg EXTRAS=sandbox -t mcm-tasks:sandbox .   # + the embedded sandbox (demo)

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# Debian's build tools float with the base image's point release; pinning them buys nothing here
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml constraints.txt README.md beat_schedule.py ./
COPY mcm_tasks ./mcm_tasks
COPY informers ./informers
COPY providers ./providers
COPY mcm_sandbox ./mcm_sandbox
# the Makefile's install, with a plain (non-editable) install of the project into its own venv
RUN python -m venv /opt/mcm-tasks \
    && /opt/mcm-tasks/bin/pip install -q -c constraints.txt --upgrade pip \
    && /opt/mcm-tasks/bin/pip install -q -c constraints.txt ".${EXTRAS:+[${EXTRAS}]}"

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="mcm-tasks" \
      org.opencontainers.image.description="Gardener's Machine Controller Manager as Celery tasks on Redis" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"
RUN groupadd --system --gid 10001 mcm \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/mcm --create-home --shell /usr/sbin/nologin mcm
COPY --from=build /opt/mcm-tasks /opt/mcm-tasks
ENV PATH=/opt/mcm-tasks/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MCM_ADDRESS=0.0.0.0 \
    MCM_PORT=10258
WORKDIR /home/mcm
USER 10001:10001
# /metrics, /healthz, /readyz, /configz of every process; Flower's UI
EXPOSE 10258 5555
CMD ["mcm-tasks", "--help"]

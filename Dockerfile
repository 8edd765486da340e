# Multi-stage build: compile in the Rust image, run from a slim Debian base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked --bin dpgate

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --create-home dpgate
COPY --from=build /src/target/release/dpgate /usr/local/bin/dpgate
USER dpgate
WORKDIR /data
VOLUME ["/data"]
ENV DATABASE_URL=sqlite:///data/dpgate.db \
    DPGATE_ADDR=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["dpgate"]
CMD ["serve"]

# sglmock's container image: a static binary on an empty base, run as a
# non-root user, serving on 0.0.0.0:30000.
#
#   podman build --format docker -t sglmock .   # or: docker build -t sglmock .
#   podman run --rm -p 30000:30000 sglmock --profile kimi-k2.6-rtx6000 --speedup 100
#
# Arguments after the image name are `sglmock serve` flags. The binary's own
# default host stays 127.0.0.1; only this image listens on every address,
# because a container's port is reached from outside its network namespace.
#
# The final stage is FROM scratch rather than a distroless base: the server
# needs no libc, shell, time zone data or package metadata, so the image is
# the binary, one passwd entry for its user and the CA bundle, and the only
# base image to trust (and to pull) is the Go toolchain of the build stage.
#
# The OCI image format has no health check: podman keeps the HEALTHCHECK
# only with --format docker (docker always does).
#
# GO_IMAGE names the build stage's Go toolchain; GOPROXY may point the module
# download elsewhere, e.g. at a local module cache through file:///...

ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
ARG GOPROXY
ENV CGO_ENABLED=0
WORKDIR /src
# The modules first: this layer stays cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/sglmock ./cmd/sglmock
# WORKDIR creates the directory: the build stage needs no mkdir.
WORKDIR /out/etc
RUN echo 'sglmock:x:65532:65532:sglmock:/nonexistent:/sbin/nologin' > passwd && \
    echo 'sglmock:x:65532:' > group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/sglmock /usr/local/bin/sglmock
# Numeric, so that Kubernetes' runAsNonRoot can check it without a passwd.
USER 65532:65532
EXPOSE 30000
# The health check asks the server on its default port; an image run with
# another --port needs its own check (sglmock health --port N).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/sglmock", "health"]
ENTRYPOINT ["/usr/local/bin/sglmock", "serve", "--host", "0.0.0.0"]

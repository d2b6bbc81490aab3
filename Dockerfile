# sglmock's container image: a static binary on an empty base, run as a
# non-root user, serving on 0.0.0.0:30000.
#
#   podman build --format docker -t sglmock:0.1.0 .   # or: docker build -t sglmock:0.1.0 .
#   podman run --rm -p 30000:30000 sglmock:0.1.0 --profile kimi-k2.6-rtx6000 --speedup 100
#
# The tag is the Helm chart's appVersion (deploy/helm/sglmock/Chart.yaml),
# which the chart pulls by default, and the version the binary reports
# (sglmock version); deploy/chartcheck checks that they agree.
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
# Two build arguments let the image build where no registry or module proxy
# can be reached (docs/install.md, "Offline"):
#   GO_IMAGE  the build stage's Go toolchain: any local image with Go 1.26 at
#             /usr/local/go and a shell, e.g. one made from the host's Go as
#             .ci/container does.
#   GOPROXY   where the modules come from; its default is Go's own. For a
#             local module cache: --build-arg GOPROXY=file:///goproxy
#             -v "$(go env GOMODCACHE)/cache/download:/goproxy:ro".

ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
# A default, so that a build that does not pass it gets no warning.
ARG GOPROXY=https://proxy.golang.org,direct
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

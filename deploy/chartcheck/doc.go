// Package chartcheck holds the tests of the Helm chart in ../helm/sglmock.
// It is a Go module of its own so that Helm and the Kubernetes API types
// stay out of sglmock's module: `go test ./...` at the repository root does
// not descend into it.
//
// The tests, for the chart's default values and for testdata/all-on.yaml
// (every option on):
//   - lint the chart as `helm lint --strict` does (Helm's pkg/lint; a
//     warning fails),
//   - render it as `helm template` does (values schema, strict templates),
//     compare the manifests with testdata/*.golden.yaml (-update rewrites
//     them) and decode every document strictly into the Kubernetes API
//     types (and the Prometheus Operator's ServiceMonitor): an unknown or
//     duplicated field fails,
//   - check what each value becomes in the typed objects,
//   - run sglmock with the rendered container's arguments, environment and
//     ConfigMap files, and probe it where the Deployment, the Service and
//     the scrape annotations point. The binary is $SGLMOCK_BIN when set
//     (CI passes the one from the container image), else built from the
//     repository,
//   - check that the image the chart pulls by default is the one the docs
//     build: the appVersion is the tag of the README's, docs/install.md's
//     and the Dockerfile's build commands, and the version the binary
//     reports.
//
// Run it from this directory: go test -count=1 ./... (the result of a run
// that builds sglmock is cached on the chart files alone).
package chartcheck

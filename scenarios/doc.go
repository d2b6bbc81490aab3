// Package scenarios holds the profiles and scenarios that reproduce each
// benchmarking trap against the mock and prove each fix, and the runner that
// plays them deterministically on virtual time in CI.
package scenarios

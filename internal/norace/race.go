//go:build race

package norace

// enabled tells whether the test binary runs under the race detector.
const enabled = true

//go:build race

package mocktest

// raceDetector tells whether the test binary runs under the race detector.
const raceDetector = true

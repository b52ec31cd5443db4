//go:build race

package pgstore_test

// raceDetector: this test binary runs under the race detector, which slows
// its worker processes five to ten times.
const raceDetector = true

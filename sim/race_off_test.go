//go:build !race

package sim

// raceEnabled: the race detector is off.
const raceEnabled = false

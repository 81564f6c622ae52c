//go:build race

package sim

// raceEnabled: the race detector is on, and allocation counts are not
// the ones a normal build makes.
const raceEnabled = true

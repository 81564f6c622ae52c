package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type tick struct {
	e     *Engine
	fired *[]time.Duration
	every time.Duration
}

func (t *tick) Fire(*Walk) {
	*t.fired = append(*t.fired, t.e.Now())
	if t.every > 0 {
		t.e.ScheduleBackground(t.every, t)
	}
}

// TestBackgroundEventsDoNotKeepRunGoing: a periodic background timer (a
// heartbeat) runs when its time comes, but Run stops once only background
// events are left; RunUntil runs them up to its deadline.
func TestBackgroundEventsDoNotKeepRunGoing(t *testing.T) {
	e := NewEngine(1)
	var bg, fg []time.Duration
	e.ScheduleBackground(10*time.Second, &tick{e: e, fired: &bg, every: 10 * time.Second})
	e.ScheduleTimer(25*time.Second, &tick{e: e, fired: &fg})
	require.False(t, e.Idle())
	require.NoError(t, e.Run())
	require.Equal(t, []time.Duration{25 * time.Second}, fg)
	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second}, bg, "due before the last foreground event")
	require.True(t, e.Idle())
	require.Equal(t, 1, e.Pending(), "the heartbeat is still scheduled")
	require.NoError(t, e.Run(), "idle: returns at once")
	require.Equal(t, 25*time.Second, e.Now())
	require.NoError(t, e.Advance(20*time.Second))
	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second}, bg)
}

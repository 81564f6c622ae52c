package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kubewalk/kubewalk/datapath"
)

// TestQueueDedupAndEarlierDeadline: a queued key is not queued twice; a key
// waiting for a retry (background) runs at once when it is added again;
// the superseded retry neither runs nor moves the clock.
func TestQueueDedupAndEarlierDeadline(t *testing.T) {
	eng := datapath.NewEngine(1)
	var runs []time.Duration
	fail := true
	q := NewQueue(eng, "test", 0, func(string) (Result, error) {
		runs = append(runs, eng.Now())
		if fail {
			fail = false
			return Result{RequeueAfter: 30 * time.Second}, nil
		}
		return Result{}, nil
	})
	q.Add("a")
	q.Add("a")
	require.NoError(t, eng.Run())
	require.Equal(t, []time.Duration{0}, runs, "queued once; the 30 s retry is background")
	require.Equal(t, 1, q.Len())
	require.NoError(t, eng.Advance(time.Second))
	q.Add("a")
	require.NoError(t, eng.Run())
	require.Equal(t, []time.Duration{0, time.Second}, runs, "the new change does not wait for the retry")
	require.NoError(t, eng.Advance(time.Minute))
	require.Equal(t, []time.Duration{0, time.Second}, runs, "the superseded retry does not run")
	require.Equal(t, 0, q.Len())
}

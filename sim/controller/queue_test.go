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

// TestQueueItemsReused: an item that has fired is let go and taken by the
// next key queued, so a queue in steady use allocates nothing per key;
// a reconcile that queues its own key again (during the reconcile, or as
// a retry) gets an item of its own, and the superseded retry, let go when
// the engine meets it, never runs.
func TestQueueItemsReused(t *testing.T) {
	eng := datapath.NewEngine(1)
	var runs []string
	again := map[string]int{}
	var q *Queue
	q = NewQueue(eng, "test", time.Second, func(key string) (Result, error) {
		runs = append(runs, key)
		if again[key] > 0 {
			again[key]--
			q.Add(key) // queued again while its item fires
		}
		if key == "retry" && len(runs) < 6 {
			return Result{RequeueAfter: time.Minute}, nil
		}
		return Result{}, nil
	})
	q.Add("a")
	require.NoError(t, eng.Run())
	require.Len(t, q.free, 1, "the fired item is let go")
	fired := q.free[0]
	q.Add("b")
	require.Same(t, fired, q.queued["b"], "and taken by the next key")
	require.Empty(t, q.free)
	require.NoError(t, eng.Run())
	require.Equal(t, []string{"a", "b"}, runs)

	again["c"] = 2
	q.Add("c")
	require.NoError(t, eng.Run())
	require.Equal(t, []string{"a", "b", "c", "c", "c"}, runs, "queued again from its own reconcile")

	q.Add("retry")
	require.NoError(t, eng.Run())
	require.NoError(t, eng.Advance(time.Second))
	q.Add("retry") // supersedes the background retry
	require.NoError(t, eng.Run())
	require.NoError(t, eng.Advance(2*time.Minute))
	require.Equal(t, []string{"a", "b", "c", "c", "c", "retry", "retry"}, runs, "the superseded retry does not run")
	require.Equal(t, 0, q.Len())

	allocs := testing.AllocsPerRun(100, func() {
		q.Add("d")
		if err := eng.Run(); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "an item let go is reused")
}

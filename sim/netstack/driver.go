package netstack

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// driver runs one world's event loop on behalf of blocked netstack calls.
// It owns the world lock: the engine, the gVisor stacks' clock and link
// endpoints, and every gVisor call made through this package run under it.
//
// The loop, for as long as some foreground call waits:
//
//  1. settle: for every stack something touched (a packet delivered, a
//     timer fired, an application call), resume its TCP processor and pause
//     it again (gVisor's own barrier: Pause returns once the processor
//     has drained its queue); then release the lock and yield the processor
//     (runtime.Gosched) until a round (two with GOMAXPROCS > 1) passes in
//     which no goroutine entered or left a netstack call and the scheduler
//     shows no other goroutine ready, so the goroutines those steps woke have run
//     up to their next blocking call; repeat until nothing is touched. A
//     step that touched no stack (a frame moving between devices, most
//     steps of a walk) needs no settle: nothing can have been woken.
//  2. if the waiting call can complete, return;
//  3. otherwise run the next event of the world's queue (a frame on a
//     device, a timer), or report that the world is idle.
type driver struct {
	e *datapath.Engine

	mu      sync.Mutex // the world lock
	driving bool
	// released, when a foreground call waits for it, is closed (and
	// dropped) when the driver stops driving, so the call can take over.
	released chan struct{}

	stacks []*Stack
	// activity counts entries into and exits from netstack calls, from
	// any goroutine.
	activity atomic.Uint64
	seen     uint64
	// kick asks settle to give goroutines a turn even if no stack is dirty
	// (a timer fired: a deadline passing, a context timing out).
	kick bool
	// yields counts settle's yield rounds (tests read it).
	yields uint64
	// directReads counts the response body reads made on the caller's
	// goroutine (body.readDirect; tests read it).
	directReads uint64

	// procs is GOMAXPROCS, read when a drive starts.
	procs int
	// maxBlocked bounds the virtual time a blocked call without a
	// deadline drives for (0: DefaultMaxBlocked; < 0: no bound).
	maxBlocked time.Duration

	freeEvents    []*vtimerEvent
	freeExchanges []*exchange
	// staleQueued counts stopped or re-armed timer events still in the
	// engine's queue: they are foreground events that will never run.
	staleQueued int
	// stackEvents counts the events in the engine's queue of the timers
	// gVisor armed (clock.AfterFunc), stale or not.
	stackEvents int
}

// idle reports whether the only foreground events left are cancelled
// timers: what is queued is background work (heartbeats, resyncs) that
// does not answer anyone.
func (d *driver) idle() bool { return d.e.Foreground() <= d.staleQueued }

type driverKey struct{}

// maxSettleRounds bounds one settle when goroutines outside the world
// (another test's) keep the machine busy.
const maxSettleRounds = 10000

// driveMu lets one world at a time drive in a process, so two worlds'
// drivers do not each see the other's goroutines as work in progress.
var driveMu sync.Mutex

// sched holds the scheduler metrics the driver reads (under driveMu):
// the runnable count first, so othersReady reads only it.
var sched = []metrics.Sample{
	{Name: "/sched/goroutines/runnable:goroutines"},
	{Name: "/sched/goroutines/running:goroutines"},
}

// othersReady reports whether any goroutine is ready to run, from the
// scheduler's own count: goroutines woken by the last step (an
// application's reader, a server's handler, the goroutines net/http hands
// work between) that have not run yet. With one processor, and the caller
// running, that is every goroutine that has not reached its next blocking
// point; with more, a goroutine already running on another processor is
// not counted (see the package documentation). The running count is no
// help there: a processor spinning for work, which every yield wakes,
// shows in it for microseconds at a time.
func othersReady() bool {
	metrics.Read(sched[:1])
	return sched[0].Value.Uint64() > 0
}

// driverFor returns the world's driver, creating it.
func driverFor(e *datapath.Engine) *driver {
	if d, ok := e.Value(driverKey{}).(*driver); ok {
		return d
	}
	d := &driver{e: e}
	e.SetValue(driverKey{}, d)
	return d
}

// settle brings every stack and every goroutine woken by the last step to
// rest. Called and returns with d.mu held.
func (d *driver) settle() {
	for {
		touched := d.kick
		d.kick = false
		for _, s := range d.stacks {
			if s.dirty {
				s.dirty = false
				s.barrier()
				touched = true
			}
		}
		a := d.activity.Load()
		if !touched && a == d.seen {
			// Nothing since the last settle could have woken a
			// goroutine: the step only moved a frame between devices
			// (most steps of a walk), and the last settle left every
			// goroutine it woke at rest.
			return
		}
		for quiet, rounds := 0, 0; quiet < d.quietRounds() && rounds < maxSettleRounds; rounds++ {
			d.yields++
			d.mu.Unlock()
			runtime.Gosched()
			d.mu.Lock()
			// On one processor the runnable count alone tells: the
			// goroutines that ran during the yield (activity moved)
			// have all blocked again when none is ready. With more, a
			// goroutine that just entered or left a call may still be
			// running on another processor: a round with activity
			// does not count.
			// (A round with activity on more than one processor does
			// not count whatever the scheduler says: it is not asked.)
			b := d.activity.Load()
			if (b != a && d.procs > 1) || othersReady() {
				quiet = 0
			} else {
				quiet++
			}
			a = b
		}
		d.seen = a
	}
}

// idleCheck is the last look before declaring the world idle: goroutines
// on other processors (GOMAXPROCS > 1), or descheduled by a loaded
// machine, may still be on their way into a netstack call. With more than
// one processor it first yields, the Go processor and the OS thread
// (sched_yield, so a descheduled thread running such a goroutine gets the
// core), up to 200 times, which catches most of them in microseconds;
// then it sleeps in short steps until the scheduler has shown no other
// goroutine running or ready three times in a row (at most about 40 ms of
// wall-clock time). It reports whether anything moved meanwhile.
func (d *driver) idleCheck() bool {
	a := d.activity.Load()
	if d.procs > 1 {
		for range 200 {
			d.mu.Unlock()
			runtime.Gosched()
			osYield()
			d.mu.Lock()
			if d.activity.Load() != a || d.anyDirty() {
				return true
			}
		}
	}
	for quiet, i := 0, 0; quiet < 3 && i < 200; i++ {
		d.mu.Unlock()
		runtime.Gosched()
		time.Sleep(200 * time.Microsecond)
		metrics.Read(sched)
		if sched[0].Value.Uint64() == 0 && sched[1].Value.Uint64() <= 1 {
			quiet++
		} else {
			quiet = 0
		}
		d.mu.Lock()
		if d.activity.Load() != a || d.anyDirty() {
			return true
		}
	}
	return false
}

// parallelCheck is the look before the clock moves on by a short step
// when goroutines can run in parallel (GOMAXPROCS > 1): it yields, with
// the world lock released so a goroutine waiting for it gets in, until
// three rounds in a row show no goroutine ready and nothing entering a
// netstack call (at most 100 rounds, microseconds). It reports whether
// anything moved.
func (d *driver) parallelCheck() bool {
	a := d.activity.Load()
	for quiet, rounds := 0, 0; quiet < 3 && rounds < 100; rounds++ {
		d.mu.Unlock()
		runtime.Gosched()
		// Activity answers without the scheduler's count.
		ready := d.activity.Load() == a && othersReady()
		d.mu.Lock()
		if d.activity.Load() != a || d.anyDirty() {
			return true
		}
		if ready {
			quiet = 0
		} else {
			quiet++
		}
	}
	return false
}

// quietRounds is how many rounds in a row must show nothing moving. On
// one processor the scheduler's runnable count is exact while the driver
// runs (nothing else can touch the run queue), so one round after a yield
// that shows no goroutine ready suffices; with more, two rounds in which
// no goroutine was ready and none entered or left a netstack call.
func (d *driver) quietRounds() int {
	if d.procs == 1 {
		return 1
	}
	return 2
}

func (d *driver) anyDirty() bool {
	for _, s := range d.stacks {
		if s.dirty {
			return true
		}
	}
	return d.kick
}

// drive runs the world until done reports true (checked after each settle)
// or nothing is left to run. Called with d.mu held and d.driving set.
func (d *driver) drive(done func() bool, bounded bool) error {
	limit := d.e.MaxEvents
	if limit == 0 {
		limit = 1_000_000
	}
	start := d.e.Now()
	d.procs = runtime.GOMAXPROCS(0)
	maxBlocked := d.maxBlocked
	if maxBlocked == 0 {
		maxBlocked = DefaultMaxBlocked
	}
	// The caller may have just started goroutines (do's f) or written
	// without waking anything: give them a turn before the first look.
	d.kick = true
	for n := 0; ; n++ {
		d.settle()
		if done() {
			return nil
		}
		next, ok := d.e.NextAt()
		if !ok || d.idle() {
			if d.idleCheck() {
				continue
			}
			return &IdleError{At: d.e.Now()}
		}
		if next > d.e.Now() && d.procs > 1 {
			// A goroutine running on another processor may be about to
			// act at the current instant. A long jump (to a timeout, a
			// retransmission) gets the idle check's patience.
			if next-d.e.Now() > time.Millisecond {
				if d.idleCheck() {
					continue
				}
			} else if d.parallelCheck() {
				continue
			}
		}
		if bounded && maxBlocked > 0 && next-start > maxBlocked {
			return &IdleError{At: d.e.Now(), Blocked: d.e.Now() - start}
		}
		if n >= limit {
			return &datapath.ErrEventLimit{Events: n, At: d.e.Now()}
		}
		d.e.Step()
	}
}

// driveLocked is drive holding driveMu: d.mu is released while waiting for
// another world's drive to end.
func (d *driver) driveLocked(done func() bool, bounded bool) error {
	if !driveMu.TryLock() {
		d.mu.Unlock()
		driveMu.Lock()
		d.mu.Lock()
	}
	defer driveMu.Unlock()
	return d.drive(done, bounded)
}

// release ends a drive and wakes foreground calls waiting to take over.
// Called with d.mu held.
func (d *driver) release() {
	d.driving = false
	if d.released != nil {
		close(d.released)
		d.released = nil
	}
}

// releasedChan returns the channel the next release closes. Called with
// d.mu held.
func (d *driver) releasedChan() chan struct{} {
	if d.released == nil {
		d.released = make(chan struct{})
	}
	return d.released
}

// task is the work do runs on a worker goroutine: run does it, and
// giveUp makes a run blocked for good return promptly (cancels its
// context).
type task interface {
	run()
	giveUp()
}

// funcTask is a task of two functions (onIdle may be nil).
type funcTask struct{ f, onIdle func() }

func (t *funcTask) run() { t.f() }

func (t *funcTask) giveUp() { t.onIdle() }

// do runs f on a new goroutine and drives the world until f returns. If
// the world idles first, onIdle (when not nil) is called once to make f
// give up (cancel its context) and the world is driven until f returns,
// and the idle error is returned; without onIdle the idle error is
// returned at once and f stays blocked. Called without d.mu.
func (d *driver) do(f func(), onIdle func()) error {
	return d.doTask(&funcTask{f: f, onIdle: onIdle}, onIdle != nil)
}

// doTask is do for a task, whose giveUp is called on idle when canGiveUp
// is set.
func (d *driver) doTask(t task, canGiveUp bool) error {
	j := newJob(d, t)
	defer j.release()
	startJob(j)
	d.mu.Lock()
	defer d.mu.Unlock()
	var idle error
	for !j.finished.Load() {
		if d.driving {
			// Someone else drives (f's caller is itself inside a
			// drive): wait for f or for the driver to stop.
			rel := d.releasedChan()
			done := j.doneChan()
			d.mu.Unlock()
			d.activity.Add(1)
			select {
			case <-done:
			case <-rel:
			}
			d.activity.Add(1)
			d.mu.Lock()
			continue
		}
		d.driving = true
		err := d.driveLocked(j.isFinished, true)
		d.release()
		if err == nil {
			continue
		}
		if idle == nil && canGiveUp {
			idle = err
			d.mu.Unlock()
			t.giveUp()
			d.mu.Lock()
			continue
		}
		if idle == nil {
			// Nothing can make f return: give up on it (it stays
			// blocked) rather than hang.
			return err
		}
		// f was told to give up and returns promptly without the world.
		done := j.doneChan()
		d.mu.Unlock()
		<-done
		d.mu.Lock()
	}
	return idle
}

// lock takes the world lock for a call from outside the driver, counted as
// activity so a settling driver waits for it.
func (d *driver) lock() {
	d.activity.Add(1)
	d.mu.Lock()
}

// unlock releases the world lock taken by lock, counted as activity too
// (so a call is counted when it enters and when it leaves, once each).
func (d *driver) unlock() {
	d.mu.Unlock()
	d.activity.Add(1)
}

// job is one task do runs on a worker goroutine. Jobs are reused: the
// worker and the do that started it each hold a reference, and the last to
// let go puts it back.
type job struct {
	t        task
	d        *driver
	finished atomic.Bool
	// isFinished is finished.Load, made once per job (a method value
	// made per drive would be allocated).
	isFinished func() bool
	refs       atomic.Int32

	mu   sync.Mutex
	done chan struct{} // made by a do that must wait for the task; closed when it ends
}

var freeJobs sync.Pool

// closedChan is the done channel of a job that has already finished.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newJob(d *driver, t task) *job {
	j, _ := freeJobs.Get().(*job)
	if j == nil {
		j = &job{}
		j.isFinished = j.finished.Load
	}
	j.t, j.d, j.done = t, d, nil
	j.finished.Store(false)
	j.refs.Store(2)
	return j
}

// release drops a reference to j.
func (j *job) release() {
	if j.refs.Add(-1) == 0 {
		j.t, j.d, j.done = nil, nil, nil
		freeJobs.Put(j)
	}
}

// doneChan returns a channel closed once the task has returned.
func (j *job) doneChan() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished.Load() {
		return closedChan
	}
	if j.done == nil {
		j.done = make(chan struct{})
	}
	return j.done
}

func (j *job) run() {
	defer func() {
		d := j.d
		j.mu.Lock()
		j.finished.Store(true)
		done := j.done
		j.mu.Unlock()
		d.activity.Add(1)
		if done != nil {
			close(done)
		}
		j.release()
	}()
	j.t.run()
}

// workers keeps goroutines that ran a job parked for the next one, so a
// call does not pay for a new goroutine and for growing its stack again
// (net/http's RoundTrip runs deep). At most maxIdleWorkers wait; the rest
// end.
var workers struct {
	mu   sync.Mutex
	idle []chan *job
}

const maxIdleWorkers = 16

// startJob runs j on an idle worker, or on a new one.
func startJob(j *job) {
	workers.mu.Lock()
	if n := len(workers.idle); n > 0 {
		ch := workers.idle[n-1]
		workers.idle = workers.idle[:n-1]
		workers.mu.Unlock()
		ch <- j
		return
	}
	workers.mu.Unlock()
	ch := make(chan *job, 1)
	ch <- j
	go worker(ch)
}

func worker(ch chan *job) {
	for j := range ch {
		j.run()
		workers.mu.Lock()
		if len(workers.idle) >= maxIdleWorkers {
			workers.mu.Unlock()
			return
		}
		workers.idle = append(workers.idle, ch)
		workers.mu.Unlock()
	}
}

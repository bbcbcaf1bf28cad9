package tasks

// DefaultMaxTasks bounds the tasks one partition's tracker holds.
const DefaultMaxTasks = 100_000

// partTracker is the task states of one partition, in log order.
type partTracker struct {
	max     int
	tasks   map[string]*taskEntry
	evicted uint64 // entries dropped to stay within max
}

type taskEntry struct {
	state State
	last  int64 // offset of its latest event
}

func newPartTracker(max int) *partTracker {
	if max <= 0 {
		max = DefaultMaxTasks
	}
	return &partTracker{max: max, tasks: map[string]*taskEntry{}}
}

// apply moves task by an event of eventType at offset; it returns the
// state before and why the event is illegal ("" when legal). An illegal
// event changes nothing.
func (t *partTracker) apply(task, eventType string, offset int64) (State, string) {
	e := t.tasks[task]
	from := None
	if e != nil {
		from = e.state
	}
	to, why := Next(from, eventType)
	if why != "" || to == None {
		return from, why
	}
	if e == nil {
		t.makeRoom()
		e = &taskEntry{}
		t.tasks[task] = e
	}
	e.state, e.last = to, offset
	return from, ""
}

// makeRoom keeps the map under max: terminal tasks go first, then the
// least recently moved quarter. A dropped task is no longer judged (an
// event after its terminal state is then let through): counted in
// aep_task_evictions_total.
func (t *partTracker) makeRoom() {
	if len(t.tasks) < t.max {
		return
	}
	before := len(t.tasks)
	for id, e := range t.tasks {
		if e.state.Terminal() {
			delete(t.tasks, id)
		}
	}
	if len(t.tasks) >= t.max {
		// the oldest quarter by their latest event
		lasts := make([]int64, 0, len(t.tasks))
		for _, e := range t.tasks {
			lasts = append(lasts, e.last)
		}
		cut := nth(lasts, len(lasts)/4)
		for id, e := range t.tasks {
			if e.last <= cut {
				delete(t.tasks, id)
			}
		}
	}
	t.evicted += uint64(before - len(t.tasks))
}

// nth is the k-th smallest of xs (0-based), reordering xs.
func nth(xs []int64, k int) int64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		p := xs[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for xs[i] < p {
				i++
			}
			for xs[j] > p {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}

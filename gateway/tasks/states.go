// Package tasks enforces dialect D's task lifecycle (task-lifecycle.md,
// conformance level AEP-C1) on the partitioned log: a worker reads every
// tenant's events topic partition by partition, in log order, keeps each
// task's state, and answers an illegal transition with an event.rejected
// written right after it in the same partition (docs/dialects.md, "Task
// states").
package tasks

import "strings"

// State is a task's lifecycle state (task-lifecycle.md "Task States").
type State uint8

// The states; the zero State is "no such task".
const (
	None State = iota
	Submitted
	Accepted
	Started
	Progress
	Blocked
	Output
	Completed
	Failed
	Cancelled
	TimedOut
)

var stateNames = [...]string{"none", "submitted", "accepted", "started", "progress", "blocked", "output", "completed", "failed", "cancelled", "timed_out"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Terminal says no further task event is legal (task-lifecycle.md:
// "Terminal states are final").
func (s State) Terminal() bool { return s >= Completed }

// stateOf maps a task.* event type to the state it moves to; false for
// types that are not transitions (task.cancel.requested, extensions).
func stateOf(eventType string) (State, bool) {
	switch eventType {
	case "task.submitted":
		return Submitted, true
	case "task.accepted":
		return Accepted, true
	case "task.started":
		return Started, true
	case "task.progress":
		return Progress, true
	case "task.blocked":
		return Blocked, true
	case "task.output":
		return Output, true
	case "task.completed":
		return Completed, true
	case "task.failed":
		return Failed, true
	case "task.cancelled":
		return Cancelled, true
	case "task.timed_out":
		return TimedOut, true
	}
	return None, false
}

// legal is task-lifecycle.md's "State Transitions" table, plus one
// choice: SUBMITTED → STARTED is taken as an implicit acceptance (the
// spec's reference harness accepts every submitted task itself, so its
// conformance fixtures go submitted → started; a gateway executes no task
// and cannot).
var legal = map[State][]State{
	Submitted: {Accepted, Started, Failed, Cancelled, TimedOut},
	Accepted:  {Started, Failed, Cancelled, TimedOut},
	Started:   {Progress, Output, Blocked, Completed, Failed, Cancelled, TimedOut},
	Blocked:   {Started, Progress, Failed, Cancelled, TimedOut},
	Progress:  {Progress, Output, Blocked, Completed, Failed, Cancelled, TimedOut},
	Output:    {Progress, Output, Blocked, Completed, Failed, Cancelled, TimedOut},
}

// IsTaskEvent says whether eventType is one of the lifecycle's
// transitions.
func IsTaskEvent(eventType string) bool {
	_, ok := stateOf(eventType)
	return ok
}

// Next is the state after an event of eventType for a task in state from,
// or why the event is illegal ("" when it is legal). Types that are not
// transitions leave the state as it is, and so does any event of a task
// not known (None) but its task.submitted. A repeat of the current state is
// legal (the reference harness's rule: a second task.accepted, a third
// task.progress), except task.submitted, which names a new task.
func Next(from State, eventType string) (State, string) {
	to, ok := stateOf(eventType)
	switch {
	case !ok:
		return from, ""
	case from == None && to == Submitted:
		return Submitted, ""
	case from == None:
		// a task the worker never saw submitted (before the retained log,
		// dropped from a full tracker, submitted elsewhere) is not judged:
		// refusing it would refuse legal work the gateway cannot see
		return None, ""
	case to == Submitted:
		return from, "duplicate task id: the task was submitted already (it is " + from.String() + ")"
	case from.Terminal():
		return from, "the task is " + from.String() + " (terminal): no further task events"
	case to == from:
		return from, ""
	}
	for _, s := range legal[from] {
		if s == to {
			return to, ""
		}
	}
	return from, "illegal task transition " + from.String() + " → " + to.String() + " (" + strings.TrimPrefix(eventType, "task.") + ")"
}

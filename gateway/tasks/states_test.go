package tasks

import (
	"strings"
	"testing"
)

// Each line: the events of one task in order, and the index of the first
// one the lifecycle refuses (-1: none), with a word of its reason.
func TestNextFollowsTheLifecycleTable(t *testing.T) {
	cases := []struct {
		name   string
		events []string
		bad    int
		reason string
	}{
		{"fixture task-lifecycle", []string{"task.submitted", "task.accepted", "task.started", "task.progress", "task.completed"}, -1, ""},
		{"implicit acceptance (the reference harness accepts itself)", []string{"task.submitted", "task.started", "task.progress", "task.completed"}, -1, ""},
		{"blocked and resumed", []string{"task.submitted", "task.accepted", "task.started", "task.blocked", "task.started", "task.output", "task.output", "task.progress", "task.completed"}, -1, ""},
		{"repeats", []string{"task.submitted", "task.accepted", "task.accepted", "task.started", "task.progress", "task.progress"}, -1, ""},
		{"cancelled before acceptance", []string{"task.submitted", "task.cancelled"}, -1, ""},
		{"not a transition", []string{"task.submitted", "task.cancel.requested", "task.cancelled"}, -1, ""},
		{"after terminal", []string{"task.submitted", "task.accepted", "task.started", "task.completed", "task.progress"}, 4, "terminal"},
		{"terminal twice", []string{"task.submitted", "task.failed", "task.failed"}, 2, "terminal"},
		{"a task never seen submitted is not judged", []string{"task.progress", "task.completed", "task.progress"}, -1, ""},
		{"duplicate submission", []string{"task.submitted", "task.accepted", "task.submitted"}, 2, "duplicate"},
		{"skipping started", []string{"task.submitted", "task.accepted", "task.progress"}, 2, "accepted → progress"},
		{"completed before started", []string{"task.submitted", "task.completed"}, 1, "submitted → completed"},
		{"blocked from accepted", []string{"task.submitted", "task.accepted", "task.blocked"}, 2, "accepted → blocked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := None
			for i, ev := range c.events {
				next, why := Next(s, ev)
				if (why != "") != (i == c.bad) {
					t.Fatalf("event %d %s from %s: reason %q (want refused: %v)", i, ev, s, why, i == c.bad)
				}
				if why != "" {
					if !strings.Contains(why, c.reason) {
						t.Fatalf("reason %q lacks %q", why, c.reason)
					}
					if next != s {
						t.Fatalf("a refused event moved %s to %s", s, next)
					}
					return
				}
				s = next
			}
		})
	}
}

// The tracker stays within its bound, dropping terminal tasks first: an
// open task survives while finished ones make room.
func TestTrackerBoundDropsTerminalFirst(t *testing.T) {
	tr := newPartTracker(8)
	tr.apply("open", "task.submitted", 0)
	for i := range 40 {
		id := "done" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		tr.apply(id, "task.submitted", int64(2*i+1))
		tr.apply(id, "task.failed", int64(2*i+2))
	}
	if len(tr.tasks) > 8 {
		t.Fatalf("holds %d tasks, bound 8", len(tr.tasks))
	}
	if _, why := tr.apply("open", "task.accepted", 100); why != "" {
		t.Fatalf("the open task was dropped: %s", why)
	}
	if tr.evicted == 0 {
		t.Fatal("no eviction counted")
	}
	// with only open tasks, the oldest quarter goes
	tr2 := newPartTracker(8)
	for i := range 20 {
		tr2.apply(string(rune('a'+i)), "task.submitted", int64(i))
	}
	if len(tr2.tasks) > 8 {
		t.Fatalf("holds %d open tasks, bound 8", len(tr2.tasks))
	}
	if _, ok := tr2.tasks[string(rune('a'+19))]; !ok {
		t.Fatal("the newest task was dropped")
	}
}

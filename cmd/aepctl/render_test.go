package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

func TestResumeTrackerBoundsSessions(t *testing.T) {
	tr := newResumeTracker(aep.DialectR)
	for i := range maxResumeSessions + 10 {
		seq := int64(i)
		tr.observe(aepclient.Item{}, &eventView{Session: fmt.Sprintf("s%03d", i), Seq: &seq})
	}
	again := int64(99)
	tr.observe(aepclient.Item{}, &eventView{Session: "s010", Seq: &again}) // moves to the end
	name, v := tr.flag()
	if name != "--from" || strings.Count(v, `"session"`) != maxResumeSessions || strings.Contains(v, `"s009"`) ||
		!strings.HasSuffix(v, `{"session":"s010","epoch":0,"seq":99}]`) {
		t.Errorf("flag %s %s", name, v)
	}
}

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Environment read by the real-browser tests (browser_chromium_test.go,
// console_chromium_test.go).
const (
	// EnvChromium names the Chromium (or Chrome) binary; without it the
	// tests look for chromium, chromium-browser and google-chrome on PATH.
	EnvChromium = "AEP_CHROMIUM"
	// EnvBrowserRequired=1 fails a browser test when no binary is found
	// instead of skipping it (.ci/run sets it once chromium is installed,
	// so a CI run cannot pass with the browser tests silently skipped).
	EnvBrowserRequired = "AEP_BROWSER_REQUIRED"
	// EnvScreenshotDir names a directory the browser tests write their
	// PNG screenshots to (.ci/run: .ci-artifacts/screenshots); unset, no
	// screenshots are written.
	EnvScreenshotDir = "AEP_SCREENSHOT_DIR"
)

// chromiumPath returns the browser binary, or skips t (fails it when
// EnvBrowserRequired=1) with the reason.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv(EnvChromium)
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	reason := ""
	switch {
	case path == "":
		reason = "no chromium, chromium-browser or google-chrome on PATH and " + EnvChromium + " unset (apt-get install chromium)"
	default:
		if _, err := os.Stat(path); err != nil {
			reason = fmt.Sprintf("%s=%s: %v", EnvChromium, path, err)
		}
	}
	if reason == "" {
		return path
	}
	if os.Getenv(EnvBrowserRequired) == "1" {
		t.Fatalf("real-browser test: %s, and %s=1", reason, EnvBrowserRequired)
	}
	t.Skipf("real-browser test skipped: %s", reason)
	return ""
}

// browser is one headless Chromium with one tab, closed when t ends. Page
// exceptions, console calls and log entries (CSP violations, failed loads)
// are kept for the test to check and are logged when it fails.
type browser struct {
	t        *testing.T
	ctx      context.Context // the tab
	deadline time.Time       // every action of the test ends by then

	mu         sync.Mutex
	console    []string // console.* calls and log entries, as "level: text"
	exceptions []string
}

// startBrowser starts Chromium headless with the flags this kind of
// machine needs (no sandbox as root, no GPU, no QUIC, no background or
// update traffic to a closed network, a fresh profile) and a 1280x900
// window. Every action of the test must be done within timeout; extra
// are more flags.
func startBrowser(t *testing.T, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	exe := chromiumPath(t)
	b := &browser{t: t, deadline: time.Now().Add(timeout)}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], // headless, no first run, no background networking, no sync
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	b.ctx = ctx
	start := time.Now()
	// The first Do starts the browser, which lives as long as ctx: no
	// timeout on it (chromedp.Run); the start itself is bounded by the
	// allocator's 20 s wait for the DevTools address.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start %s: %v", exe, err)
	}
	t.Logf("chromium %s started in %v", exe, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			t.Logf("browser console:\n%s\nexceptions:\n%s", strings.Join(b.console, "\n"), strings.Join(b.exceptions, "\n"))
			b.mu.Unlock()
		}
		cancelTab() // closes the tab and, as the allocator's first, the browser
		cancelAlloc()
	})
	return b
}

// listen keeps the page's exceptions, console calls and log entries. It
// runs on chromedp's reader goroutine: quick, no commands.
func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var args []string
		for _, a := range ev.Args {
			args = append(args, strings.Trim(string(a.Value), `"`)+a.Description)
		}
		b.console = append(b.console, string(ev.Type)+": "+strings.Join(args, " "))
	case *cdplog.EventEntryAdded:
		if e := ev.Entry; e != nil {
			b.console = append(b.console, fmt.Sprintf("%s: %s (%s)", e.Level, e.Text, e.URL))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.exceptions = append(b.exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber, msg))
	}
}

// run runs chromedp actions in the tab, failing t on error with what.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithDeadline(b.ctx, b.deadline)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// get runs one chromedp action that returns a value.
func get[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithDeadline(b.ctx, b.deadline)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// eval evaluates a JavaScript expression that gives a string.
func (b *browser) eval(js string) string {
	b.t.Helper()
	return get(b, "evaluate "+js, chromedp.Evaluate[string](js))
}

// click clicks the element sel names the way a user's click reaches it
// (HTMLElement.click: the click event, a form's submit), from the page
// itself. chromedp.Click presses the mouse at the element's box as read a
// moment before; the console's fleet view grows above the panels as events
// arrive, and a press landing after such a shift hit whatever moved there
// (the tests flaked on it).
func (b *browser) click(what, sel string) {
	b.t.Helper()
	js := "(() => { const el = document.querySelector(" + strconv.Quote(sel) + "); if (!el) return false; el.click(); return true; })()"
	if !get(b, what, chromedp.Evaluate[bool](js)) {
		b.t.Fatalf("browser: %s: no element %s", what, sel)
	}
}

// waitFor polls the JavaScript expression js (a boolean) until it is true,
// failing t with what and the string expression detail when it never is
// within d.
func (b *browser) waitFor(what, js, detail string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for !get(b, "wait for "+what, chromedp.Evaluate[bool](js)) {
		if time.Now().After(deadline) {
			b.t.Fatalf("browser: %s: not within %v; the page shows: %s", what, d, b.eval(detail))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// problems returns the page's uncaught exceptions and the error-level log
// entries and console calls (a CSP violation, a failed load) so far, but
// for those that mention one of the ignore strings.
func (b *browser) problems(ignore ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]string(nil), b.exceptions...)
next:
	for _, c := range b.console {
		if !strings.HasPrefix(c, "error: ") {
			continue
		}
		for _, s := range ignore {
			if strings.Contains(c, s) {
				continue next
			}
		}
		out = append(out, c)
	}
	return out
}

// screenshot saves the full page as name (a .png) in EnvScreenshotDir, if
// set, and logs the path.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv(EnvScreenshotDir)
	if dir == "" {
		return
	}
	png := get(b, "screenshot "+name, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

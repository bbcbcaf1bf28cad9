package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The shapes of aepbench's JSON reports (only the fields used here).
type ingestJSON struct {
	Concurrency int     `json:"concurrency"`
	Batch       int     `json:"batch"`
	LoadAvg     string  `json:"load_average"`
	Gateway     phase   `json:"gateway"`
	Baseline    *phase  `json:"baseline"`
	Ratio       float64 `json:"ratio_gateway_kafka"`
	CPURatio    float64 `json:"cpu_ratio_kafka_gateway"` // 0: not measured
	// Routed is the baseline writing the gateway's own records (key and
	// routing headers); nil when the run had none.
	Routed      *phase  `json:"baseline_routed"`
	RoutedRatio float64 `json:"ratio_gateway_kafka_routed"`
	// HTTPFloor is the same requests to a server that only reads them and
	// answers 202; nil when the run had none.
	HTTPFloor      *phase  `json:"baseline_http"`
	HTTPFloorRatio float64 `json:"ratio_gateway_http_floor"`
}

// ingestRuns are the ingest reports bench-report.sh writes, as
// ingest-KEY.json, in table order: real Kafka, then the embedded broker,
// then WebSocket emitters on the real Kafka; goal is the bound on
// the ratio to direct produce (0: none).
var ingestRuns = []struct {
	key, what string
	goal      float64
}{
	{"100", "batched ingest, 100 events/request, conc. %d, real Kafka", 0.7},
	{"1000", "batched ingest, 1000 events/request, conc. %d, real Kafka", 0.7},
	{"1", "one event per request, conc. %d, real Kafka", 0.5},
	{"emb-100", "batched ingest, 100 events/request, conc. %d, embedded broker", 0.7},
	{"emb-1000", "batched ingest, 1000 events/request, conc. %d, embedded broker", 0.7},
	{"emb-1", "one event per request, conc. %d, embedded broker", 0.5},
	{"ws-d-1", "WebSocket D, one event a message, each answered before the next, %d connections, real Kafka", 0.5},
	{"ws-r-1", "WebSocket R, one event a message, a ping after each, %d connections, real Kafka", 0.5},
	{"ws-d-16", "WebSocket D, one event a message, 16 sent between answers, %d connections, real Kafka (direct: batches of 16)", 0},
	{"ws-r-16", "WebSocket R, one event a message, a ping after 16, %d connections, real Kafka (direct: batches of 16)", 0},
}

type phase struct {
	AcceptedPerS float64 `json:"accepted_per_sec"`
}

type fanoutJSON struct {
	LoadAvg string      `json:"load_average"`
	Runs    []fanoutRun `json:"runs"`
}

type fanoutRun struct {
	Peer        string `json:"peer"`
	Transport   string `json:"transport"`
	Subscribers int    `json:"subscribers"`
	Deliveries  int64  `json:"deliveries"`
	CPU         int64  `json:"cpu_ns"`
	Window      int64  `json:"window_ns"`
	Missing     int64  `json:"missing"`
	Retries     int64  `json:"publish_retries"`
	Batch       int    `json:"batch"`
	Publishers  int    `json:"publishers"`
	Broker      string `json:"broker"` // "kafka", "embedded" or "" (not measured)
	BrokerCPU   int64  `json:"broker_cpu_ns"`
}

// caveat notes a run whose deliveries did not match what was published:
// lost (missing > 0) or duplicated by resent publishes (missing < 0).
func (f *fanoutJSON) caveat(peer, tr string, subs int) string {
	for _, x := range f.Runs {
		if x.Peer != peer || x.Transport != tr || x.Subscribers != subs || (x.Missing == 0 && x.Retries == 0) {
			continue
		}
		switch {
		case x.Missing < 0:
			return fmt.Sprintf(" (%d publishes resent after no answer: %s duplicate deliveries counted)", x.Retries, evs(float64(-x.Missing)))
		case x.Missing > 0:
			return fmt.Sprintf(" (%s deliveries missing)", evs(float64(x.Missing)))
		}
		return fmt.Sprintf(" (%d publishes resent)", x.Retries)
	}
	return ""
}

type latencyJSON struct {
	LoadAvg string `json:"load_average"`
	Runs    []struct {
		Path    string  `json:"path"`
		Rate    float64 `json:"rate"`
		Sent    int64   `json:"sent"`
		Lost    int64   `json:"lost"`
		Latency struct {
			P50 float64 `json:"p50"`
			P90 float64 `json:"p90"`
			P99 float64 `json:"p99"`
		} `json:"latency_ms"`
	} `json:"runs"`
}

type idleJSON struct {
	LoadAvg string    `json:"load_average"`
	Runs    []idleRun `json:"runs"`
}

// idleRun is one server's run of `aepbench idle`.
type idleRun struct {
	Peer        string `json:"peer"`
	Transport   string `json:"transport"`
	Connections int    `json:"connections"`
	RSSOpen     int64  `json:"rss_open"`
	PerConn     int64  `json:"rss_per_connection"`
	StormPeak   int64  `json:"storm_peak"`
}

type meta struct {
	Commit  string            `json:"commit"`
	Date    string            `json:"date"`
	Machine string            `json:"machine"`
	Kafka   string            `json:"kafka"`
	Knobs   map[string]string `json:"knobs"`
}

// results are every input found.
type results struct {
	meta   meta
	ingest map[string]*ingestJSON // by ingestRuns key
	fanout *fanoutJSON            // batched publishes, real Kafka (fanout.json)
	// fanoutSingle and fanoutEmb are the single-event fan-out cases: on the
	// real Kafka (fanout-single.json) and on the embedded broker
	// (fanout-emb.json).
	fanoutSingle, fanoutEmb *fanoutJSON
	latency                 *latencyJSON
	idle                    *idleJSON
	resume                  map[string][]float64 // sub-benchmark → first-data ns/op of each round
}

func load(dir string) (*results, error) {
	r := &results{ingest: map[string]*ingestJSON{}}
	if _, err := readJSON(filepath.Join(dir, "meta.json"), &r.meta); err != nil {
		return nil, err
	}
	for _, run := range ingestRuns {
		k := run.key
		var x ingestJSON
		ok, err := readJSON(filepath.Join(dir, "ingest-"+k+".json"), &x)
		if err != nil {
			return nil, err
		}
		if ok {
			r.ingest[k] = &x
		}
	}
	for name, v := range map[string]any{"fanout.json": &r.fanout, "fanout-single.json": &r.fanoutSingle, "fanout-emb.json": &r.fanoutEmb,
		"latency.json": &r.latency, "idle.json": &r.idle} {
		if _, err := readJSON(filepath.Join(dir, name), v); err != nil {
			return nil, err
		}
	}
	var err error
	r.resume, err = readResume(filepath.Join(dir, "resume.txt"))
	return r, err
}

// resumeLine matches BenchmarkSSEResumePartitionSize/partition=10k#01-2 ... N first-data-ns/op.
var resumeLine = regexp.MustCompile(`^BenchmarkSSEResumePartitionSize/(partition=\w+)(?:#\d+)?(?:-\d+)?\s.*?\s([\d.]+) first-data-ns/op`)

func readResume(path string) (map[string][]float64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := resumeLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = append(out[m[1]], v)
		}
	}
	return out, sc.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

// row is one line of the comparative table.
type row struct {
	what, gateway, peer, ratio, goal, verdict string
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func (r *results) ingestRows() []row {
	var out []row
	for _, c := range ingestRuns {
		x := r.ingest[c.key]
		if x == nil || x.Baseline == nil {
			continue
		}
		peer := "franz-go direct produce " + evs(x.Baseline.AcceptedPerS)
		if x.CPURatio > 0 {
			peer += fmt.Sprintf(" (CPU time per event, direct over gateway: %.2f)", x.CPURatio)
		}
		if x.Routed != nil && x.Baseline.AcceptedPerS > 0 {
			peer += fmt.Sprintf("; the same producer writing the gateway's records (key, routing headers) %s = %.2f of direct, gateway/that %.2f",
				evs(x.Routed.AcceptedPerS), x.Routed.AcceptedPerS/x.Baseline.AcceptedPerS, x.RoutedRatio)
		}
		if x.HTTPFloor != nil && x.Baseline.AcceptedPerS > 0 {
			peer += fmt.Sprintf("; an HTTP server that only reads the requests and answers 202 %s = %.2f of direct, gateway/that %.2f",
				evs(x.HTTPFloor.AcceptedPerS), x.HTTPFloor.AcceptedPerS/x.Baseline.AcceptedPerS, x.HTTPFloorRatio)
		}
		goal, met := "-", "-"
		if c.goal > 0 {
			goal, met = fmt.Sprintf("≥ %.1f", c.goal), verdict(x.Ratio >= c.goal)
		}
		out = append(out, row{fmt.Sprintf(c.what, x.Concurrency), evs(x.Gateway.AcceptedPerS) + " ev/s",
			peer, fmt.Sprintf("%.2f", x.Ratio), goal, met})
	}
	return out
}

func evs(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func (f *fanoutJSON) perCPU(peer, tr string, subs int) (float64, bool) {
	x, ok := f.run(peer, tr, subs)
	return x.perCPU(), ok
}

func (f *fanoutJSON) subscriberCounts() []int {
	var out []int
	for _, x := range f.Runs {
		if !slices.Contains(out, x.Subscribers) {
			out = append(out, x.Subscribers)
		}
	}
	sort.Ints(out)
	return out
}

var transportName = map[string][2]string{"sse": {"SSE", "uni_sse"}, "ws": {"WebSocket", "uni_websocket"}}

func (r *results) fanoutRows() []row {
	if r.fanout == nil {
		return nil
	}
	var out []row
	for _, tr := range []string{"sse", "ws"} {
		for _, n := range r.fanout.subscriberCounts() {
			g, ok1 := r.fanout.perCPU("gateway", tr, n)
			c, ok2 := r.fanout.perCPU("centrifugo", tr, n)
			if !ok1 || !ok2 {
				continue
			}
			out = append(out, row{fmt.Sprintf("fan-out, 1 publisher → %d %s subscribers, saturated, deliveries per CPU-second", n, transportName[tr][0]),
				evs(g) + r.fanout.caveat("gateway", tr, n), "Centrifugo v6.9.1 " + transportName[tr][1] + " " + evs(c) + r.fanout.caveat("centrifugo", tr, n),
				fmt.Sprintf("%.2f", g/c), "≥ 1.5", verdict(g/c >= 1.5)})
		}
	}
	return out
}

// fanoutCases is the fan-out table of every publishing shape: single-event
// publishes (what most publishers send) beside batched ones, on the real
// Kafka and on the embedded broker, with the broker's CPU and the
// whole-system figure (deliveries per CPU-second of gateway + broker).
func (r *results) fanoutCases() string {
	type source struct {
		f      *fanoutJSON
		broker string // where the broker ran, for the case's name
	}
	var b strings.Builder
	for _, src := range []source{{r.fanoutSingle, "real Kafka"}, {r.fanout, "real Kafka"}, {r.fanoutEmb, "embedded broker"}} {
		if src.f == nil {
			continue
		}
		for _, tr := range []string{"sse", "ws"} {
			for _, n := range src.f.subscriberCounts() {
				g, ok := src.f.run("gateway", tr, n)
				if !ok {
					continue
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", fanoutCaseName(g, src.broker),
					evs(g.perCPU())+src.f.caveat("gateway", tr, n), brokerCell(g), systemCell(g), centrifugoCell(src.f, tr, n),
					ratioCell(src.f, g, tr, n, false), ratioCell(src.f, g, tr, n, true), src.f.LoadAvg)
			}
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "### Fan-out by publishing shape\n\n" +
		"Deliveries per CPU-second, saturated; \"1 event/publish\" is a publish request per event (8 in flight), the way most publishers send; " +
		"\"100 events/publish\" is the batched case of the table above. Whole system = deliveries per CPU-second of gateway + its broker " +
		"(the embedded broker runs inside the gateway process, so there it is the gateway's figure); Centrifugo has no broker, its " +
		"whole-system figure is its own. Ratios are gateway/Centrifugo.\n\n" +
		"| case | gateway deliveries/CPU-s | broker CPU-s | whole system deliveries/CPU-s | Centrifugo v6.9.1 deliveries/CPU-s | ratio, gateway only | ratio, whole system | load average |\n" +
		"|---|---|---|---|---|---|---|---|\n" + b.String() + "\n"
}

func fanoutCaseName(g fanoutRun, broker string) string {
	shape := fmt.Sprintf("%d events/publish, %d publishers", g.Batch, g.Publishers)
	switch g.Batch {
	case 0: // a report from before aepbench recorded the shape
		shape = "batched publishes"
	case 1:
		shape = fmt.Sprintf("1 event/publish, %d publishers", g.Publishers)
	}
	return fmt.Sprintf("%s → %d %s subscribers, %s", shape, g.Subscribers, transportName[g.Transport][0], broker)
}

func brokerCell(g fanoutRun) string {
	switch g.Broker {
	case "embedded":
		return "in the gateway process (embedded)"
	case "kafka":
		return fmt.Sprintf("%.2f s", float64(g.BrokerCPU)/1e9)
	}
	return "not measured (no broker pid)"
}

func systemCell(g fanoutRun) string {
	if g.Broker == "" {
		return "n/a"
	}
	return evs(g.systemPerCPU())
}

func centrifugoCell(f *fanoutJSON, tr string, n int) string {
	c, ok := f.run("centrifugo", tr, n)
	if !ok {
		return "not run"
	}
	return evs(c.perCPU()) + f.caveat("centrifugo", tr, n)
}

// ratioCell is gateway/Centrifugo, of the gateway alone or, with system,
// of gateway + broker (n/a when the broker was not measured).
func ratioCell(f *fanoutJSON, g fanoutRun, tr string, n int, system bool) string {
	c, ok := f.run("centrifugo", tr, n)
	if !ok || c.perCPU() == 0 || (system && g.Broker == "") {
		return "n/a"
	}
	if system {
		return fmt.Sprintf("%.2f", g.systemPerCPU()/c.perCPU())
	}
	return fmt.Sprintf("%.2f", g.perCPU()/c.perCPU())
}

func (x *fanoutRun) perCPU() float64 {
	if x.CPU <= 0 {
		return 0
	}
	return float64(x.Deliveries) / (float64(x.CPU) / 1e9)
}

// systemPerCPU adds the broker's CPU (zero when embedded or not measured).
func (x *fanoutRun) systemPerCPU() float64 {
	if x.CPU+x.BrokerCPU <= 0 {
		return 0
	}
	return float64(x.Deliveries) / (float64(x.CPU+x.BrokerCPU) / 1e9)
}

func (f *fanoutJSON) run(peer, tr string, subs int) (fanoutRun, bool) {
	for _, x := range f.Runs {
		if x.Peer == peer && x.Transport == tr && x.Subscribers == subs && x.CPU > 0 {
			return x, true
		}
	}
	return fanoutRun{}, false
}

func (r *results) idleRows() []row {
	if r.idle == nil {
		return nil
	}
	var out []row
	for _, tr := range []string{"sse", "ws"} {
		var g, c *idleRun
		for i := range r.idle.Runs {
			x := &r.idle.Runs[i]
			if x.Transport == tr && x.Peer == "gateway" {
				g = x
			} else if x.Transport == tr && x.Peer == "centrifugo" {
				c = x
			}
		}
		if g == nil {
			continue
		}
		peer, ratio := "", ""
		if c != nil && c.PerConn > 0 {
			peer = fmt.Sprintf("Centrifugo %.1f KB", float64(c.PerConn)/1024)
			ratio = fmt.Sprintf("%.2f", float64(g.PerConn)/float64(c.PerConn))
		}
		out = append(out, row{fmt.Sprintf("idle %s connection, RSS per connection at %s", transportName[tr][0], evs(float64(g.Connections))),
			fmt.Sprintf("%.1f KB", float64(g.PerConn)/1024), peer, ratio, "≤ 16 KB", verdict(g.PerConn <= 16<<10)})
		spike := float64(g.StormPeak-g.RSSOpen) / float64(g.RSSOpen)
		peer = ""
		if c != nil && c.RSSOpen > 0 {
			peer = fmt.Sprintf("Centrifugo %+.1f%%", 100*float64(c.StormPeak-c.RSSOpen)/float64(c.RSSOpen))
		}
		out = append(out, row{fmt.Sprintf("%s disconnect storm: all %s closed at once, RSS peak over RSS open", transportName[tr][0], evs(float64(g.Connections))),
			fmt.Sprintf("%+.1f%% (%d → %d MB)", 100*spike, g.RSSOpen>>20, g.StormPeak>>20), peer, "", "≤ +10%", verdict(spike <= 0.10)})
	}
	return out
}

func (r *results) latencyRows() []row {
	if r.latency == nil {
		return nil
	}
	var out []row
	rates := map[float64][4]float64{} // gateway p99, direct p99, gateway p50, direct p50
	for _, x := range r.latency.Runs {
		v := rates[x.Rate]
		if x.Path == "gateway" {
			v[0], v[2] = x.Latency.P99, x.Latency.P50
		} else {
			v[1], v[3] = x.Latency.P99, x.Latency.P50
		}
		rates[x.Rate] = v
	}
	keys := make([]float64, 0, len(rates))
	for k := range rates {
		keys = append(keys, k)
	}
	sort.Float64s(keys)
	for _, k := range keys {
		v := rates[k]
		added := v[0] - v[1]
		verd := verdict(added <= 3)
		if v[1] > 10*v[3] { // direct's own p99 ≫ its p50: the machine's stalls set both p99s
			verd = "inconclusive (direct p99 > 10× its p50: machine stalls)"
		}
		out = append(out, row{fmt.Sprintf("publish→SSE deliver p99 added over direct produce→consume, %s ev/s, real Kafka", evs(k)),
			fmt.Sprintf("%+.2f ms (p99 %.2f ms; p50 %.2f ms, %+.2f ms over direct)", added, v[0], v[2], v[2]-v[3]),
			fmt.Sprintf("direct p99 %.2f ms, p50 %.2f ms", v[1], v[3]), "", "≤ 3 ms", verd})
	}
	return out
}

// resumeRows pairs the rounds (the benchmark alternates 10k and 1M, so a
// round's two figures saw the same load) and reports the median ratio.
func (r *results) resumeRows() []row {
	small, big := r.resume["partition=10k"], r.resume["partition=1M"]
	n := min(len(small), len(big))
	if n == 0 {
		return nil
	}
	ratios := make([]float64, n)
	for i := range n {
		ratios[i] = big[i] / small[i]
	}
	ratio := median(ratios)
	return []row{{fmt.Sprintf("SSE resume to first byte, 1M vs 10k events per partition (embedded broker; median of %d alternating rounds)", n),
		fmt.Sprintf("%.2f vs %.2f ms (medians)", median(big)/1e6, median(small)/1e6), "", fmt.Sprintf("%.2f", ratio), "≤ 1.2", verdict(ratio <= 1.2)}}
}

// markdown is the generated section: the provenance, the table, the charts.
func (r *results) markdown(charts []chart, imgDir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Comparative benchmark (issue 13)\n\n")
	m := r.meta
	fmt.Fprintf(&b, "Produced by `make bench-report` in one run on %s, commit %s, %s; Kafka: %s. ", m.Date, m.Commit, m.Machine, m.Kafka)
	fmt.Fprintf(&b, "Each row's peer was measured in the same command as the gateway, so the ratio is the figure to compare between runs; the load average of each command is listed below the table. Knobs: %s. How each figure is measured: docs/aepbench.md (ingest, fanout, latency, idle); the cost model built on them: docs/scaling.md.\n\n", knobs(m.Knobs))
	fmt.Fprintf(&b, "| what | gateway | peer in the same run | ratio | goal | |\n|---|---|---|---|---|---|\n")
	var rows []row
	rows = append(rows, r.ingestRows()...)
	rows = append(rows, r.fanoutRows()...)
	rows = append(rows, r.idleRows()...)
	rows = append(rows, r.latencyRows()...)
	rows = append(rows, r.resumeRows()...)
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", x.what, x.gateway, x.peer, x.ratio, x.goal, x.verdict)
	}
	b.WriteString("\nLoad average (1, 5, 15 min) at the end of each command:")
	for _, run := range ingestRuns {
		if x := r.ingest[run.key]; x != nil && x.LoadAvg != "" {
			fmt.Fprintf(&b, " ingest %s: %s;", run.key, x.LoadAvg)
		}
	}
	if r.fanout != nil {
		fmt.Fprintf(&b, " fan-out: %s;", r.fanout.LoadAvg)
	}
	if r.idle != nil {
		fmt.Fprintf(&b, " idle: %s;", r.idle.LoadAvg)
	}
	if r.latency != nil {
		fmt.Fprintf(&b, " latency: %s.", r.latency.LoadAvg)
	}
	b.WriteString("\n\n")
	b.WriteString(r.fanoutCases())
	for _, c := range charts {
		fmt.Fprintf(&b, "![%s](%s/%s)\n\n", c.title, imgDir, c.file)
	}
	return b.String()
}

func knobs(k map[string]string) string {
	keys := make([]string, 0, len(k))
	for key := range k {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var parts []string
	for _, key := range keys {
		parts = append(parts, fmt.Sprintf("%s=%s", key, k[key]))
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return "`" + strings.Join(parts, " ") + "`"
}

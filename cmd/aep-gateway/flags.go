package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// envName is the environment-variable twin of a flag: AEP_ and the flag
// name in upper snake case (--kafka-brokers is AEP_KAFKA_BROKERS).
func envName(flagName string) string {
	return "AEP_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSet wraps flag.FlagSet so that every flag has an environment twin:
// the environment sets the default, the command line overrides it.
type flagSet struct {
	*flag.FlagSet
	envErrs []error
}

func newFlagSet(name string) *flagSet {
	return &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
}

func (fs *flagSet) env(name string) (string, bool) { return os.LookupEnv(envName(name)) }

func (fs *flagSet) usage(name, usage string) string {
	return usage + " [$" + envName(name) + "]"
}

func (fs *flagSet) String(p *string, name, def, usage string) {
	if v, ok := fs.env(name); ok {
		def = v
	}
	fs.StringVar(p, name, def, fs.usage(name, usage))
}

func (fs *flagSet) Bool(p *bool, name string, def bool, usage string) {
	if v, ok := fs.env(name); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
		} else {
			def = b
		}
	}
	fs.BoolVar(p, name, def, fs.usage(name, usage))
}

func (fs *flagSet) Int(p *int, name string, def int, usage string) {
	if v, ok := fs.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
		} else {
			def = n
		}
	}
	fs.IntVar(p, name, def, fs.usage(name, usage))
}

func (fs *flagSet) Int64(p *int64, name string, def int64, usage string) {
	if v, ok := fs.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
		} else {
			def = n
		}
	}
	fs.Int64Var(p, name, def, fs.usage(name, usage))
}

func (fs *flagSet) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	if v, ok := fs.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
		} else {
			def = d
		}
	}
	fs.DurationVar(p, name, def, fs.usage(name, usage))
}

func (fs *flagSet) Float64(p *float64, name string, def float64, usage string) {
	if v, ok := fs.env(name); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%s=%q: %w", envName(name), v, err))
		} else {
			def = f
		}
	}
	fs.Float64Var(p, name, def, fs.usage(name, usage))
}

// unknownEnv lists the variables of environ that look like the gateway's
// (AEP_ and upper snake case) but name no flag, each with the flag variable
// it is closest to when one is near (a misspelling): a typo such as
// AEP_KAFKA_BROKER would otherwise be ignored without a word. They are
// warned about, not refused: test harnesses and other tools in the same pod
// use AEP_ variables of their own.
func (fs *flagSet) unknownEnv(environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "AEP_") || known[name] {
			continue
		}
		best, bestD := "", 4 // suggest within 3 edits
		for k := range known {
			if d := editDistance(name, k); d < bestD || d == bestD && k < best {
				best, bestD = k, d
			}
		}
		if best != "" {
			name += " (did you mean " + best + "?)"
		}
		out = append(out, name)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

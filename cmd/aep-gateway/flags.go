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

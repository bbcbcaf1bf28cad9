package aep

import "strings"

// HeaderAEPVersion is the request header dialect R's HTTP binding requires
// on POST {base}/events (AEP-0003 §3.2.2).
const HeaderAEPVersion = "AEP-Version"

// The envelope versions this package accepts. R: the envelope schema pins
// "aep" to the constant "0.1" (schemas/aep-event.schema.json; the invalid
// fixture "unsupported envelope version" rejects "0.2"). D: "aep_version" is
// MAJOR.MINOR (versioning.md); 0.1 is the only version D defines, and this
// gateway accepts exactly the listed versions (docs/dialects.md).
var (
	versionsR = []string{"0.1"}
	versionsD = []string{"0.1"}
)

// SupportedVersions returns the envelope versions accepted for dialect d,
// newest first (a fresh slice; R's 426 body is {"versions": this}).
func SupportedVersions(d Dialect) []string {
	switch d {
	case DialectR:
		return append([]string(nil), versionsR...)
	case DialectD:
		return append([]string(nil), versionsD...)
	}
	return nil
}

// VersionSupported reports whether v is an accepted envelope version of d.
func VersionSupported(d Dialect, v string) bool {
	tab := versionsR
	if d == DialectD {
		tab = versionsD
	} else if d != DialectR {
		return false
	}
	for _, s := range tab {
		if s == v {
			return true
		}
	}
	return false
}

// AcceptVersionHeader reports whether an R AEP-Version request header value
// names a supported major version (AEP-0003 §3.2.2: an unsupported major is
// answered 426 with {"versions": SupportedVersions(DialectR)}). The value is
// MAJOR.MINOR; "0.7" is accepted because its major is 0, and the events of
// the request are then held to the "aep" attribute rules. An empty value
// (header absent) is not accepted; docs/dialects.md says what to answer.
func AcceptVersionHeader(value string) bool {
	major, ok := versionMajor(strings.TrimSpace(value))
	if !ok {
		return false
	}
	for _, s := range versionsR {
		if m, _ := versionMajor(s); m == major {
			return true
		}
	}
	return false
}

// versionMajor returns the MAJOR of a MAJOR.MINOR version string.
func versionMajor(v string) (string, bool) {
	dot := strings.IndexByte(v, '.')
	if dot <= 0 || dot == len(v)-1 {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if i != dot && (v[i] < '0' || v[i] > '9') {
			return "", false
		}
	}
	return v[:dot], true
}

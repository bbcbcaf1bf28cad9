package chartcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// kubeVersions are the Kubernetes minors the chart supports, oldest first:
// 1.23 (autoscaling/v2), 1.28, 1.30 (the preStop sleep action) and the
// newest the Go types here know.
var kubeVersions = []string{"1.23.0", "1.28.0", "1.30.0", "1.37.0"}

var chartDir = filepath.Join("..", "..", "charts", "aep-gateway")

// external is the smallest configuration against an external Kafka.
var external = []string{"--set", "kafka.brokers=k:9092"}

func helmPath(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		h := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	t.Fatal("no helm: set HELM, put it on PATH, or run scripts/chart-check.sh, which builds it")
	return ""
}

// helm runs helm with args and returns its standard output, or an error
// carrying its standard error.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(helmPath(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), nil
}

func template(t *testing.T, kube string, args ...string) ([]byte, error) {
	t.Helper()
	return helm(t, append([]string{"template", "aep", chartDir, "--namespace", "events", "--kube-version", kube}, args...)...)
}

// manifest is a render decoded into typed objects.
type manifest struct {
	objs []any
}

// newObject is the Go type of apiVersion/kind: every kind the chart
// renders, and only those.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Pod": // the helm test hook
		return &corev1.Pod{}, nil
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "gateway.networking.k8s.io/v1 HTTPRoute":
		return &gatewayv1.HTTPRoute{}, nil
	case "cert-manager.io/v1 Certificate":
		return &certificate{}, nil
	}
	return nil, fmt.Errorf("%s %s is no kind this check knows", apiVersion, kind)
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits a render into documents and decodes each strictly: an
// unknown or duplicated field is an error, as is an unknown kind.
func decode(out []byte) (*manifest, error) {
	m := &manifest{}
	for _, doc := range docSep.Split(string(out), -1) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("a document does not parse: %w", err)
		}
		if head.Kind == "" {
			if strings.TrimSpace(stripComments(doc)) != "" {
				return nil, fmt.Errorf("a document without a kind: %q", doc)
			}
			continue
		}
		obj, err := newObject(head.APIVersion, head.Kind)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s %s does not decode strictly: %w", head.APIVersion, head.Kind, err)
		}
		m.objs = append(m.objs, obj)
	}
	return m, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// all returns every object of type T in m.
func all[T any](m *manifest) []T {
	var out []T
	for _, o := range m.objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the one object of type T in m, failing t when there is not
// exactly one.
func one[T any](t *testing.T, m *manifest) T {
	t.Helper()
	got := all[T](m)
	if len(got) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(got), zero)
	}
	return got[0]
}

// render renders and decodes, failing t on either error.
func render(t *testing.T, kube string, args ...string) *manifest {
	t.Helper()
	out, err := template(t, kube, args...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(out)
	if err != nil {
		t.Fatalf("kube %s %v: %v", kube, args, err)
	}
	return m
}

// refused checks that the chart refuses args on kube with an error that
// contains want.
func refused(t *testing.T, kube, want string, args ...string) {
	t.Helper()
	_, err := template(t, kube, args...)
	if err == nil {
		t.Fatalf("kube %s %v rendered; want it refused with %q", kube, args, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("kube %s %v refused with %v; want %q", kube, args, err, want)
	}
}

func container(t *testing.T, m *manifest) corev1.Container {
	t.Helper()
	d := one[*appsv1.Deployment](t, m)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// cases are the configurations rendered for every Kubernetes minor: no
// values, every ci/ values file, and the shapes the tests below look at.
func cases(t *testing.T) map[string][]string {
	t.Helper()
	c := map[string][]string{
		"defaults":       nil,
		"three-replicas": append(slicesOf(external), "--set", "replicaCount=3"),
		"hpa-floor-1":    append(slicesOf(external), "--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=1"),
		"network-policy": append(slicesOf(external), "--set", "networkPolicy.enabled=true",
			"--set-json", `networkPolicy.ingressFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ingress-nginx"}}}]`,
			"--set-json", `networkPolicy.egress=[{"ports":[{"port":9093,"protocol":"TCP"}]}]`),
		"strimzi-ca": append(slicesOf(external), "--set", "kafka.tls.enabled=true", "--set", "kafka.tls.caSecret=my-cluster-cluster-ca-cert"),
	}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files under %s: %v", chartDir, err)
	}
	for _, f := range files {
		c["ci/"+filepath.Base(f)] = []string{"-f", f}
	}
	return c
}

func slicesOf(s []string) []string { return append([]string(nil), s...) }

// Every configuration renders, lints strictly and decodes strictly into
// the API types on every supported minor.
func TestRendersOnEveryKubernetesMinor(t *testing.T) {
	for _, kube := range kubeVersions {
		for name, args := range cases(t) {
			t.Run(kube+"/"+name, func(t *testing.T) {
				m := render(t, kube, args...)
				c := container(t, m)
				if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
					t.Error("the container's root file system is writable")
				}
				for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
					if p == nil || p.HTTPGet == nil {
						t.Fatal("a probe is missing or not HTTP")
					}
				}
				if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
					t.Errorf("probes on %s and %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
				}
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil && kube < "1.30" {
					t.Errorf("a preStop sleep on Kubernetes %s, which has no sleep action", kube)
				}
				if _, err := helm(t, append([]string{"lint", "--strict", chartDir, "--kube-version", kube}, args...)...); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// The PodDisruptionBudget allows one pod down unless told otherwise, so a
// one-pod floor (an HPA at minReplicas 1) never blocks a node drain;
// either bound can be set alone; both at once is refused.
func TestPodDisruptionBudget(t *testing.T) {
	type bounds struct{ min, max string }
	for _, tc := range []struct {
		name string
		args []string
		want bounds
	}{
		{"default", []string{"--set", "replicaCount=3"}, bounds{"", "1"}},
		{"hpa floor 1", []string{"--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=1"}, bounds{"", "1"}},
		{"maxUnavailable alone", []string{"--set", "replicaCount=3", "--set", "podDisruptionBudget.maxUnavailable=2"}, bounds{"", "2"}},
		{"minAvailable alone", []string{"--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=50%"}, bounds{"50%", ""}},
	} {
		for _, kube := range kubeVersions {
			t.Run(tc.name+"/"+kube, func(t *testing.T) {
				pdb := one[*policyv1.PodDisruptionBudget](t, render(t, kube, append(slicesOf(external), tc.args...)...))
				got := bounds{}
				if pdb.Spec.MinAvailable != nil {
					got.min = pdb.Spec.MinAvailable.String()
				}
				if pdb.Spec.MaxUnavailable != nil {
					got.max = pdb.Spec.MaxUnavailable.String()
				}
				if got != tc.want {
					t.Fatalf("minAvailable %q maxUnavailable %q, want %q %q", got.min, got.max, tc.want.min, tc.want.max)
				}
			})
		}
	}
	refused(t, "1.30.0", "at '/podDisruptionBudget'", append(slicesOf(external), "--set", "replicaCount=3",
		"--set", "podDisruptionBudget.minAvailable=1", "--set", "podDisruptionBudget.maxUnavailable=1")...)
	// One pod: no budget (it could only block drains).
	if n := len(all[*policyv1.PodDisruptionBudget](render(t, "1.30.0", external...))); n != 0 {
		t.Fatalf("%d PodDisruptionBudgets for one pod, want none", n)
	}
}

// With autoscaling the HPA owns the replica count and its floor is what
// the values say.
func TestHorizontalPodAutoscaler(t *testing.T) {
	m := render(t, "1.23.0", append(slicesOf(external), "--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=1")...)
	hpa := one[*autoscalingv2.HorizontalPodAutoscaler](t, m)
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 1 || hpa.Spec.MaxReplicas != 10 {
		t.Fatalf("HPA %v..%d, want 1..10", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	d := one[*appsv1.Deployment](t, m)
	if d.Spec.Replicas != nil {
		t.Fatalf("the Deployment sets replicas %d beside an HPA", *d.Spec.Replicas)
	}
	if hpa.Spec.ScaleTargetRef.Name != d.Name || hpa.Spec.ScaleTargetRef.Kind != "Deployment" {
		t.Fatalf("the HPA scales %v, not the Deployment %s", hpa.Spec.ScaleTargetRef, d.Name)
	}
}

// The NetworkPolicy selects the gateway's pods, admits the listed sources
// to the HTTP port only, and restricts egress only when rules are given.
func TestNetworkPolicy(t *testing.T) {
	if n := len(all[*networkingv1.NetworkPolicy](render(t, "1.30.0", external...))); n != 0 {
		t.Fatalf("%d NetworkPolicies by default, want none", n)
	}
	m := render(t, "1.23.0", cases(t)["network-policy"]...)
	np := one[*networkingv1.NetworkPolicy](t, m)
	d := one[*appsv1.Deployment](t, m)
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Fatalf("the policy selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Fatal("the policy selects every pod in the namespace")
	}
	if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "http" ||
		len(np.Spec.Ingress[1].Ports) != 1 || np.Spec.Ingress[1].Ports[0].Port.String() != "admin" {
		t.Fatalf("ingress rules %+v, want one for the http port and one for the admin port", np.Spec.Ingress)
	}
	if len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].NamespaceSelector == nil {
		t.Fatalf("ingress from %+v, want the ingress controller's namespace", np.Spec.Ingress[0].From)
	}
	if got := fmt.Sprint(np.Spec.PolicyTypes); got != "[Ingress Egress]" {
		t.Fatalf("policy types %s with egress rules given", got)
	}
	m = render(t, "1.23.0", append(slicesOf(external), "--set", "networkPolicy.enabled=true")...)
	if got := fmt.Sprint(one[*networkingv1.NetworkPolicy](t, m).Spec.PolicyTypes); got != "[Ingress]" {
		t.Fatalf("policy types %s without egress rules: egress would be denied", got)
	}
}

// Draining is the gateway's own (--drain-delay) on every minor; a preStop
// sleep is opt-in and refused where Kubernetes has no sleep action; the
// grace period covers the sleep, the drain delay and the shutdown timeout.
func TestDrainAndPreStop(t *testing.T) {
	for _, kube := range kubeVersions {
		c := container(t, render(t, kube))
		if c.Lifecycle != nil {
			t.Errorf("kube %s: a lifecycle hook by default: %+v", kube, c.Lifecycle)
		}
		if e, _ := env(c, "AEP_DRAIN_DELAY"); e.Value != "10s" {
			t.Errorf("kube %s: AEP_DRAIN_DELAY %q, want 10s", kube, e.Value)
		}
	}
	d := one[*appsv1.Deployment](t, render(t, "1.23.0"))
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 10+30+10 {
		t.Fatalf("grace %v, want drain 10 + shutdown 30 + 10", g)
	}
	for _, kube := range []string{"1.23.0", "1.28.0"} {
		refused(t, kube, "needs Kubernetes 1.30+", "--set", "preStop.sleepSeconds=5")
	}
	for _, kube := range []string{"1.30.0", "1.37.0"} {
		m := render(t, kube, "--set", "preStop.sleepSeconds=5")
		c := container(t, m)
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
			t.Fatalf("kube %s: lifecycle %+v, want a 5 s preStop sleep", kube, c.Lifecycle)
		}
		if g := one[*appsv1.Deployment](t, m).Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 5+10+30+10 {
			t.Fatalf("kube %s: grace %v, want 5 + 10 + 30 + 10", kube, g)
		}
	}
	refused(t, "1.30.0", "shorter than", "--set", "terminationGracePeriodSeconds=39")
}

// GOMEMLIMIT follows the container's memory limit (90%) unless given.
func TestGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"embedded", nil, "900MiB"},
		{"external 1Gi", external, "921MiB"},
		{"external 512Mi", append(slicesOf(external), "--set", "resources.limits.memory=512Mi"), "460MiB"},
		{"external 2G", append(slicesOf(external), "--set", "resources.limits.memory=2G"), "1716MiB"},
		{"external given", append(slicesOf(external), "--set", "goMemLimit=700MiB"), "700MiB"},
		{"external no limit", append(slicesOf(external), "--set", "resources.limits=null"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := env(container(t, render(t, "1.30.0", tc.args...)), "GOMEMLIMIT")
			if e.Value != tc.want || ok != (tc.want != "") {
				t.Fatalf("GOMEMLIMIT %q (set %v), want %q", e.Value, ok, tc.want)
			}
		})
	}
}

// The node id is the pod's name unless config.node-id names one.
func TestNodeIDIsThePodName(t *testing.T) {
	e, ok := env(container(t, render(t, "1.30.0", external...)), "AEP_NODE_ID")
	if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Fatalf("AEP_NODE_ID %+v, want the pod's metadata.name", e)
	}
	e, _ = env(container(t, render(t, "1.30.0", append(slicesOf(external), "--set", "config.node-id=gw-a")...)), "AEP_NODE_ID")
	if e.Value != "gw-a" || e.ValueFrom != nil {
		t.Fatalf("AEP_NODE_ID %+v with config.node-id=gw-a", e)
	}
}

// A CA kept in a Secret of its own (Strimzi's <cluster>-cluster-ca-cert)
// is mounted and named to the gateway.
func TestKafkaCASecret(t *testing.T) {
	m := render(t, "1.30.0", cases(t)["strimzi-ca"]...)
	c := container(t, m)
	if e, _ := env(c, "AEP_KAFKA_TLS_CA"); e.Value != "/etc/aep-gateway/kafka-ca/ca.crt" {
		t.Fatalf("AEP_KAFKA_TLS_CA %q", e.Value)
	}
	found := false
	for _, v := range one[*appsv1.Deployment](t, m).Spec.Template.Spec.Volumes {
		found = found || v.Secret != nil && v.Secret.SecretName == "my-cluster-cluster-ca-cert"
	}
	if !found {
		t.Fatal("the CA Secret is not a volume")
	}
}

// values.schema.json refuses misspelt keys in the blocks that reach the
// pod spec, and helm lint --strict fails where helm template refuses.
func TestSchemaRefusesTypos(t *testing.T) {
	for _, set := range []string{
		"probes.readiness.timeoutSecond=3",
		"probes.liveness.path=/x",
		"resources.limit.memory=1Gi",
		"resources.limits.memroy=1Gi",
		"podSecurityContext.runAsUsr=1000",
		"securityContext.readOnlyRootFS=true",
		"networkPolicy.ingresFrom=x",
		"preStop.seconds=5",
	} {
		t.Run(set, func(t *testing.T) {
			refused(t, "1.30.0", "additional properties", append(slicesOf(external), "--set", set)...)
		})
	}
	// The embedded broker runs in one pod only: lint fails like template.
	_, err := helm(t, "lint", "--strict", chartDir, "--set", "replicaCount=3")
	if err == nil {
		t.Fatal("helm lint --strict --set replicaCount=3 passed; the chart refuses it at install")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("helm lint: %v", err)
	}
}

// An API key's principal and scopes reach its line of the key file; a
// scope outside the vocabulary or a principal with a space is refused
// before anything is deployed.
func TestAPIKeyPrincipalAndScopes(t *testing.T) {
	const digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	key := []string{"--set", "auth.apiKeys[0].tenant=acme", "--set", "auth.apiKeys[0].sha256=" + digest}
	m := render(t, "1.30.0", append(key, "--set", "auth.apiKeys[0].principal=agent-a",
		"--set", "auth.apiKeys[0].scopes={emit:agent:a,write:tool}")...)
	want := "acme sha256:" + digest + " principal=agent-a scopes=emit:agent:a,write:tool"
	found := false
	for _, s := range all[*corev1.Secret](m) {
		found = found || strings.Contains(s.StringData["api-keys"], want)
	}
	if !found {
		t.Fatalf("no Secret holds the line %q", want)
	}
	m = render(t, "1.30.0", "--set", "auth.apiKeys[0].tenant=acme", "--set", "auth.apiKeys[0].cert=dashboard-1")
	found = false
	for _, s := range all[*corev1.Secret](m) {
		found = found || strings.Contains(s.StringData["api-keys"], "acme cert:dashboard-1\n")
	}
	if !found {
		t.Fatal("no Secret holds the cert: line")
	}
	refused(t, "1.30.0", `scope "delete:x"`, append(key, "--set", "auth.apiKeys[0].scopes={delete:x}")...)
	refused(t, "1.30.0", "principal must be", append(key, "--set", "auth.apiKeys[0].principal=a b")...)
}

// The admin port is on by default: --admin-listen set, the probes and the
// ServiceMonitor on it, the Service naming it; service.adminPort=0 puts
// them all back on the HTTP port.
func TestAdminPort(t *testing.T) {
	for _, c := range []struct {
		args   []string
		port   string
		listen string
	}{
		{nil, "admin", "0.0.0.0:9090"},
		{[]string{"--set", "service.adminPort=0"}, "http", ""},
	} {
		m := render(t, "1.30.0", append(slicesOf(external), c.args...)...)
		ctr := container(t, m)
		if e, _ := env(ctr, "AEP_ADMIN_LISTEN"); e.Value != c.listen {
			t.Errorf("%v: AEP_ADMIN_LISTEN %q, want %q", c.args, e.Value, c.listen)
		}
		for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe} {
			if got := p.HTTPGet.Port.String(); got != c.port {
				t.Errorf("%v: probe %s on port %s, want %s", c.args, p.HTTPGet.Path, got, c.port)
			}
		}
		named := false
		for _, p := range one[*corev1.Service](t, m).Spec.Ports {
			named = named || p.TargetPort.String() == c.port
		}
		if !named {
			t.Errorf("%v: the Service has no port for %s", c.args, c.port)
		}
	}
}

// certificate is the part of a cert-manager Certificate the chart renders
// (cert-manager's Go types are not a dependency of this check).
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName string            `json:"secretName"`
		IssuerRef  map[string]string `json:"issuerRef"`
		DNSNames   []string          `json:"dnsNames"`
	} `json:"spec"`
}

// serverTLS: an existing Secret or a cert-manager Certificate mounted and
// named to the binary; the probes stay on the plain admin port, or switch
// to HTTPS without it; enabled without a source is refused.
func TestServerTLS(t *testing.T) {
	m := render(t, "1.30.0", append(slicesOf(external), "--set", "serverTLS.enabled=true", "--set", "serverTLS.existingSecret=gw-tls",
		"--set", "serverTLS.clientCA.existingSecret=clients-ca")...)
	c := container(t, m)
	for k, want := range map[string]string{"AEP_TLS_CERT_FILE": "/etc/aep-gateway/tls/tls.crt", "AEP_TLS_KEY_FILE": "/etc/aep-gateway/tls/tls.key",
		"AEP_TLS_CLIENT_CA": "/etc/aep-gateway/tls-client-ca/ca.crt"} {
		if e, _ := env(c, k); e.Value != want {
			t.Errorf("%s %q, want %q", k, e.Value, want)
		}
	}
	secrets := map[string]bool{}
	for _, v := range one[*appsv1.Deployment](t, m).Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = true
		}
	}
	if !secrets["gw-tls"] || !secrets["clients-ca"] {
		t.Errorf("volumes from Secrets %v, want gw-tls and clients-ca", secrets)
	}
	if c.ReadinessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		t.Error("the probes on the admin port are plain HTTP")
	}
	m = render(t, "1.30.0", append(slicesOf(external), "--set", "serverTLS.enabled=true", "--set", "serverTLS.certManager.issuerRef.name=le",
		"--set", "serverTLS.certManager.issuerRef.kind=ClusterIssuer", "--set", "service.adminPort=0")...)
	cert := one[*certificate](t, m)
	if cert.Spec.IssuerRef["name"] != "le" || cert.Spec.SecretName == "" || len(cert.Spec.DNSNames) < 2 {
		t.Errorf("Certificate %+v", cert.Spec)
	}
	if p := container(t, m).ReadinessProbe.HTTPGet; p.Scheme != corev1.URISchemeHTTPS || p.Port.String() != "http" {
		t.Errorf("readiness probe %+v, want HTTPS on the http port", p)
	}
	refused(t, "1.30.0", "serverTLS.enabled needs", append(slicesOf(external), "--set", "serverTLS.enabled=true")...)
}

// The SASL password reaches the gateway as a mounted file, read again at
// each connection (--kafka-sasl-password-file), not as an environment
// variable a rotation cannot change.
func TestSASLPasswordIsAFile(t *testing.T) {
	m := render(t, "1.30.0", cases(t)["ci/external-values.yaml"]...)
	c := container(t, m)
	if e, ok := env(c, "AEP_KAFKA_SASL_PASSWORD"); ok {
		t.Errorf("the password is in the environment: %+v", e)
	}
	if e, _ := env(c, "AEP_KAFKA_SASL_PASSWORD_FILE"); e.Value != "/etc/aep-gateway/kafka-sasl/password" {
		t.Errorf("AEP_KAFKA_SASL_PASSWORD_FILE %q", e.Value)
	}
	mounted := false
	for _, v := range one[*appsv1.Deployment](t, m).Spec.Template.Spec.Volumes {
		mounted = mounted || v.Name == "kafka-sasl" && v.Secret != nil && v.Secret.SecretName == "kafka-sasl"
	}
	if !mounted {
		t.Error("the SASL Secret is not a volume")
	}
}

// The audit sealer in the gateway pods: the signing key is a mounted
// Secret file, never an environment value; sealing on a real cluster
// without one is refused.
func TestAuditSealer(t *testing.T) {
	ext := cases(t)["ci/external-values.yaml"]
	m := render(t, "1.30.0", append(ext, "--set", "audit.seal=on", "--set", "audit.signingKey.existingSecret=audit-key",
		"--set", "audit.publicKeys.existingSecret=audit-old")...)
	c := container(t, m)
	for name, want := range map[string]string{"AEP_AUDIT_SEAL": "on", "AEP_AUDIT_SIGNING_KEY": "/etc/aep-gateway/audit-signing/audit-signing.pem",
		"AEP_AUDIT_PUBLIC_KEYS": "/etc/aep-gateway/audit-public/audit-public.pem", "AEP_AUDIT_CHECKPOINT_INTERVAL": "5s"} {
		if e, _ := env(c, name); e.Value != want {
			t.Errorf("%s = %q, want %q", name, e.Value, want)
		}
	}
	secrets := map[string]bool{}
	for _, v := range one[*appsv1.Deployment](t, m).Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = true
		}
	}
	if !secrets["audit-key"] || !secrets["audit-old"] {
		t.Errorf("the audit key Secrets are not volumes: %v", secrets)
	}
	refused(t, "1.30.0", "audit.signingKey.existingSecret", append(ext, "--set", "audit.seal=on")...)
	// the default, on a real cluster: off (auto), nothing mounted
	c = container(t, render(t, "1.30.0", ext...))
	if e, _ := env(c, "AEP_AUDIT_SEAL"); e.Value != "auto" {
		t.Errorf("AEP_AUDIT_SEAL %q by default", e.Value)
	}
	if _, ok := env(c, "AEP_AUDIT_SIGNING_KEY"); ok {
		t.Error("a signing key path without a Secret")
	}
}

// The bridges: off by default; turned on, each sets its flags; rules become
// a ConfigMap mounted where --bridge-rules reads them, holding the values'
// document; a malformed endpoint or ceiling is refused by the schema.
func TestBridges(t *testing.T) {
	ext := cases(t)["ci/external-values.yaml"]
	c := container(t, render(t, "1.30.0", ext...))
	for _, name := range []string{"AEP_CLOUDEVENTS_BRIDGE", "AEP_OCSF_BRIDGE", "AEP_OTLP_LOGS_ENDPOINT", "AEP_BRIDGE_RULES"} {
		if _, ok := env(c, name); ok {
			t.Errorf("%s set by default", name)
		}
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("bridges:\n  rules:\n    tenants:\n      acme:\n        cloudevents:\n          filter: {type: [\"tool.*\"]}\n          max_capture: redacted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := render(t, "1.30.0", append(ext, "--set", "bridges.cloudevents.enabled=true", "--set", "bridges.ocsf.enabled=true",
		"--set", "bridges.ocsf.maxCapture=none", "--set", "bridges.otlpLogs.endpoint=http://collector:4318/v1/logs", "-f", rules)...)
	c = container(t, m)
	for name, want := range map[string]string{"AEP_CLOUDEVENTS_BRIDGE": "true", "AEP_CLOUDEVENTS_MAX_CAPTURE": "metadata",
		"AEP_CLOUDEVENTS_BRIDGE_GROUP": "aep-cloudevents-bridges", "AEP_CLOUDEVENTS_MODE": "structured", "AEP_OCSF_BRIDGE": "true", "AEP_OCSF_MAX_CAPTURE": "none",
		"AEP_OTLP_LOGS_ENDPOINT": "http://collector:4318/v1/logs", "AEP_OTLP_LOGS_TIMEOUT": "10s", "AEP_OTLP_LOGS_GROUP": "aep-otlp-bridges",
		"AEP_BRIDGE_RULES": "/etc/aep-gateway/bridge-rules/rules.json"} {
		if e, _ := env(c, name); e.Value != want {
			t.Errorf("%s = %q, want %q", name, e.Value, want)
		}
	}
	mounted := false
	for _, v := range c.VolumeMounts {
		mounted = mounted || (v.Name == "bridge-rules" && v.MountPath == "/etc/aep-gateway/bridge-rules")
	}
	var cm *corev1.ConfigMap
	for _, x := range all[*corev1.ConfigMap](m) {
		if strings.HasSuffix(x.Name, "-bridge-rules") {
			cm = x
		}
	}
	if !mounted || cm == nil {
		t.Fatalf("rules mounted %v, ConfigMap %v", mounted, cm)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(cm.Data["rules.json"]), &doc); err != nil {
		t.Fatalf("rules.json %q: %v", cm.Data["rules.json"], err)
	}
	want := `{"tenants":{"acme":{"cloudevents":{"filter":{"type":["tool.*"]},"max_capture":"redacted"}}}}`
	if got, _ := json.Marshal(doc); string(got) != want {
		t.Errorf("rules.json %s, want %s", got, want)
	}
	refused(t, "1.30.0", "maxCapture", append(ext, "--set", "bridges.ocsf.maxCapture=all")...)
	refused(t, "1.30.0", "endpoint", append(ext, "--set", "bridges.otlpLogs.endpoint=collector:4318")...)
}

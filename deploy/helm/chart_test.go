package helm

import (
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/internal/settings"
)

const (
	chartDir  = "sluice"
	namespace = "rate-limit"
	release   = "edge"
)

// kubeVersion is the oldest the chart supports: native sidecars.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.29.0", Major: "1", Minor: "29"}

// types are the kinds the chart renders, each decoded strictly into its
// project's Go type: a kind missing here fails the test.
var types = map[string]func() any{
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
	"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": func() any {
		return &admissionregistrationv1.MutatingWebhookConfiguration{}
	},
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"cert-manager.io/v1/Certificate":          func() any { return &cmv1.Certificate{} },
	"cert-manager.io/v1/Issuer":               func() any { return &cmv1.Issuer{} },
}

// release is one rendering of the chart: its objects, decoded, and the
// values it was rendered with (the chart's defaults under the value set).
type rendering struct {
	objs   []injecttest.Object
	values chartutil.Values // .Values
	yaml   string           // every template's output, as `helm template` prints it
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// readValues is a value set of ci/, with overrides set on top (dotted
// paths, as --set takes them).
func readValues(t *testing.T, file string, set map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", file))
		if err != nil {
			t.Fatal(err)
		}
		vals = v
	}
	for path, v := range set {
		m := vals
		keys := strings.Split(path, ".")
		for _, k := range keys[:len(keys)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[keys[len(keys)-1]] = v
	}
	return vals
}

// render is `helm template` in process, with missing values an error
// (a template that names a value the chart does not have), every
// document decoded strictly.
func render(t *testing.T, vals map[string]any) rendering {
	t.Helper()
	r, err := tryRender(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryRender(t *testing.T, vals map[string]any) (rendering, error) {
	t.Helper()
	c := loadChart(t)
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, caps)
	if err != nil {
		return rendering{}, err
	}
	out, err := engine.Engine{Strict: true}.Render(c, rv)
	if err != nil {
		return rendering{}, err
	}
	var r rendering
	r.values = rv["Values"].(chartutil.Values)
	var all strings.Builder
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(name, ".tpl") || strings.TrimSpace(out[name]) == "" {
			continue
		}
		fmt.Fprintf(&all, "---\n# Source: %s\n%s\n", name, out[name])
		objs, err := decode([]byte(out[name]))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out[name])
		}
		r.objs = append(r.objs, objs...)
	}
	r.yaml = all.String()
	return r, nil
}

// decode decodes a rendering strictly, every object against its Go type.
func decode(stream []byte) ([]injecttest.Object, error) {
	return injecttest.DecodeWith(stream, types, true)
}

func find[T any](t *testing.T, r rendering, kind, name string) T {
	t.Helper()
	v := injecttest.Find[T](r.objs, kind, name)
	if any(v) == any(*new(T)) {
		t.Fatalf("no %s %s in the rendering; have %v", kind, name, kinds(r))
	}
	return v
}

func kinds(r rendering) []string {
	var ks []string
	for _, o := range r.objs {
		ks = append(ks, o.Kind+" "+o.Name)
	}
	return ks
}

var valueSets = []string{"default-values.yaml", "central-values.yaml", "full-values.yaml", "webhook-only-values.yaml"}

// Each value set of ci/ lints clean and renders; the set of objects each
// renders is the one its values ask for.
func TestChartLintsAndRenders(t *testing.T) {
	want := map[string][]string{
		"default-values.yaml": {"v1/Secret edge-sluice-upstream", "v1/ConfigMap edge-sluice-policies", "v1/ConfigMap edge-sluice-rls",
			"v1/Secret edge-sluice-http-token", "apps/v1/Deployment edge-sluice", "v1/Service edge-sluice",
			"policy/v1/PodDisruptionBudget edge-sluice", "networking.k8s.io/v1/NetworkPolicy edge-sluice"},
		"central-values.yaml": {"v1/Secret edge-sluice-upstream", "v1/ConfigMap edge-sluice-policies", "v1/ConfigMap edge-sluice-rls",
			"v1/Secret edge-sluice-http-token", "apps/v1/Deployment edge-sluice", "v1/Service edge-sluice",
			"policy/v1/PodDisruptionBudget edge-sluice", "networking.k8s.io/v1/NetworkPolicy edge-sluice",
			"monitoring.coreos.com/v1/ServiceMonitor edge-sluice", "v1/ConfigMap edge-sluice-dashboard",
			"monitoring.coreos.com/v1/PrometheusRule edge-sluice"},
		"full-values.yaml": {"v1/ConfigMap rl-policies", "v1/ConfigMap rl-rls", "apps/v1/Deployment rl", "v1/Service rl",
			"policy/v1/PodDisruptionBudget rl", "autoscaling/v2/HorizontalPodAutoscaler rl", "networking.k8s.io/v1/NetworkPolicy rl",
			"monitoring.coreos.com/v1/ServiceMonitor rl", "monitoring.coreos.com/v1/PodMonitor rl-sidecars",
			"v1/ConfigMap rl-dashboard", "monitoring.coreos.com/v1/PrometheusRule rl",
			"cert-manager.io/v1/Certificate rl-webhook", "v1/ServiceAccount rl-webhook", "apps/v1/Deployment rl-webhook",
			"v1/Service rl-webhook", "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration rl-webhook"},
		"webhook-only-values.yaml": {"v1/Secret edge-sluice-webhook-tls", "v1/ServiceAccount edge-sluice-webhook",
			"apps/v1/Deployment edge-sluice-webhook", "v1/Service edge-sluice-webhook",
			"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration edge-sluice-webhook"},
	}
	for _, file := range valueSets {
		t.Run(file, func(t *testing.T) {
			vals := readValues(t, file, nil)
			l := lint.AllWithKubeVersion(chartDir, vals, namespace, kubeVersion)
			for _, m := range l.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
			r := render(t, vals)
			got := kinds(r)
			sort.Strings(got)
			w := slices.Clone(want[file])
			sort.Strings(w)
			if !slices.Equal(got, w) {
				t.Errorf("rendered %v;\nwant %v", got, w)
			}
		})
	}
}

// The chart deploys the version of Sluice it is tested with: its
// appVersion is the tag of the image `sluice inject` puts in pods.
func TestChartVersionIsTheBinarys(t *testing.T) {
	c := loadChart(t)
	repo := c.Values["image"].(map[string]any)["repository"]
	if got := fmt.Sprintf("%v:%s", repo, c.Metadata.AppVersion); got != inject.DefaultImage {
		t.Errorf("the chart deploys %s; this version of sluice inject injects %s", got, inject.DefaultImage)
	}
}

// Without Redis, a central deployment would count per pod: the chart
// refuses to render, saying what to set.
func TestChartNeedsTheUpstream(t *testing.T) {
	_, err := tryRender(t, readValues(t, "", nil))
	if err == nil || !strings.Contains(err.Error(), "upstream.existingSecret or upstream.url is required") {
		t.Errorf("rendering without an upstream: %v", err)
	}
	if _, err := tryRender(t, readValues(t, "", map[string]any{"central.enabled": false})); err != nil {
		t.Errorf("without the central deployment, no upstream is needed: %v", err)
	}
}

// centralSettings parses the central container's args and environment as
// the binary does, and checks that it would start with them (the doors'
// protected mode included).
func centralSettings(t *testing.T, c corev1.Container, env map[string]string) settings.Config {
	t.Helper()
	cfg := settings.Default()
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the binary refuses its args %v: %v", c.Args, err)
	}
	if err := settings.ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the binary refuses the central container's settings %v: %v", c.Args, err)
	}
	return cfg
}

func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// The central deployment, for every value set that has one: its settings
// start the binary; its Service, PodDisruptionBudget, autoscaler,
// NetworkPolicy and ServiceMonitor all reach its pods and their ports; it
// mounts what the chart renders or the values name.
func TestCentralDeployment(t *testing.T) {
	for _, file := range []string{"default-values.yaml", "central-values.yaml", "full-values.yaml"} {
		t.Run(file, func(t *testing.T) {
			r := render(t, readValues(t, file, nil))
			name := "edge-sluice"
			if file == "full-values.yaml" {
				name = "rl"
			}
			dep := find[*appsv1.Deployment](t, r, "apps/v1/Deployment", name)
			pod := dep.Spec.Template
			if !selects(dep.Spec.Selector.MatchLabels, pod.Labels) {
				t.Errorf("selector %v does not select the pods %v", dep.Spec.Selector.MatchLabels, pod.Labels)
			}
			c := pod.Spec.Containers[0]
			env := map[string]string{"SLUICE_UPSTREAM": "redis://redis:6379", "SLUICE_HTTP_TOKEN": "x"}
			cfg := centralSettings(t, c, env)
			for door, addr := range map[string]string{"grpc": cfg.GRPCListen, "http": cfg.HTTPListen, inject.AdminPortName: cfg.AdminListen} {
				_, port, err := net.SplitHostPort(addr)
				if err != nil || port != fmt.Sprint(containerPort(c, door)) {
					t.Errorf("%s listens on %q; its container port is %d", door, addr, containerPort(c, door))
				}
			}
			for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || containerPort(c, p.HTTPGet.Port.String()) == 0 {
					t.Errorf("a probe %+v does not reach a named port", p)
				}
			}
			if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
				c.SecurityContext.RunAsNonRoot == nil || !*c.SecurityContext.RunAsNonRoot {
				t.Errorf("securityContext %+v", c.SecurityContext)
			}
			for _, e := range c.Env {
				if e.Value != "" {
					t.Errorf("env %s is written into the pod spec; secrets come from a Secret", e.Name)
				}
			}
			for _, a := range c.Args {
				if strings.Contains(a, "redis://") || strings.Contains(a, "token") {
					t.Errorf("a secret in the args: %s", a)
				}
			}
			svc := find[*corev1.Service](t, r, "v1/Service", name)
			if !selects(svc.Spec.Selector, pod.Labels) {
				t.Errorf("the Service selects %v, not the pods %v", svc.Spec.Selector, pod.Labels)
			}
			for _, p := range svc.Spec.Ports {
				if containerPort(c, p.TargetPort.String()) != p.Port {
					t.Errorf("Service port %s %d reaches container port %d", p.Name, p.Port, containerPort(c, p.TargetPort.String()))
				}
			}
			pdb := find[*policyv1.PodDisruptionBudget](t, r, "policy/v1/PodDisruptionBudget", name)
			if !selects(pdb.Spec.Selector.MatchLabels, pod.Labels) || pdb.Spec.MaxUnavailable == nil {
				t.Errorf("PodDisruptionBudget %+v", pdb.Spec)
			}
			np := find[*networkingv1.NetworkPolicy](t, r, "networking.k8s.io/v1/NetworkPolicy", name)
			if !selects(np.Spec.PodSelector.MatchLabels, pod.Labels) {
				t.Errorf("the NetworkPolicy selects %v", np.Spec.PodSelector)
			}
			doors := map[string]bool{}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if containerPort(c, p.Port.String()) == 0 {
						t.Errorf("the NetworkPolicy opens port %s, which the container does not name", p.Port.String())
					}
					if len(rule.From) == 0 && p.Port.String() != inject.AdminPortName {
						t.Errorf("door %s is open to every pod", p.Port.String())
					}
					doors[p.Port.String()] = len(rule.From) > 0
				}
			}
			if !doors["grpc"] || !doors["http"] {
				t.Errorf("the doors admitted only from the gateways: %v", doors)
			}
			// Every volume's ConfigMap is rendered, or a Secret the values name.
			for _, v := range pod.Spec.Volumes {
				if v.ConfigMap != nil {
					find[*corev1.ConfigMap](t, r, "v1/ConfigMap", v.ConfigMap.Name)
				}
			}
			for _, e := range c.Env {
				ref := e.ValueFrom.SecretKeyRef
				if s := injecttest.Find[*corev1.Secret](r.objs, "v1/Secret", ref.Name); s != nil {
					if _, ok := s.StringData[ref.Key]; !ok {
						t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
					}
				} else if file != "full-values.yaml" {
					t.Errorf("env %s: Secret %s is not rendered", e.Name, ref.Name)
				}
			}
			if sm := injecttest.Find[*monitoringv1.ServiceMonitor](r.objs, "monitoring.coreos.com/v1/ServiceMonitor", name); sm != nil {
				if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || len(sm.Spec.Endpoints) != 1 ||
					!slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sm.Spec.Endpoints[0].Port }) {
					t.Errorf("ServiceMonitor %+v does not reach the Service's admin port", sm.Spec)
				}
			}
			if file == "full-values.yaml" {
				checkFullCentral(t, r, dep, cfg)
			}
		})
	}
}

// The values of full-values.yaml reach the objects.
func checkFullCentral(t *testing.T, r rendering, dep *appsv1.Deployment, cfg settings.Config) {
	t.Helper()
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas %d while the autoscaler sets them", *dep.Spec.Replicas)
	}
	hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, r, "autoscaling/v2/HorizontalPodAutoscaler", "rl")
	if hpa.Spec.ScaleTargetRef.Name != dep.Name || hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.MaxReplicas != 12 ||
		hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 3 {
		t.Errorf("autoscaler %+v", hpa.Spec)
	}
	if pdb := find[*policyv1.PodDisruptionBudget](t, r, "policy/v1/PodDisruptionBudget", "rl"); pdb.Spec.MaxUnavailable.IntValue() != 2 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/sluice:1.2.3" || dep.Spec.Template.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("image %s, pull secrets %v", c.Image, dep.Spec.Template.Spec.ImagePullSecrets)
	}
	if cfg.GRPCInsecure || !strings.HasPrefix(cfg.GRPCTLSClientCA, "/etc/sluice/grpc-tls/") || cfg.LogFormat != "json" || !cfg.Grants {
		t.Errorf("gRPC TLS with client certificates, JSON logs, grants: %+v", cfg)
	}
	mounted := false
	for _, v := range dep.Spec.Template.Spec.Volumes {
		mounted = mounted || v.Secret != nil && v.Secret.SecretName == "sluice-grpc-tls"
	}
	if !mounted {
		t.Error("the gRPC TLS Secret is not mounted")
	}
	want := map[string]string{"SLUICE_UPSTREAM": "redis-credentials/url", "SLUICE_HTTP_TOKEN": "gateway-token/secret"}
	for _, e := range c.Env {
		if ref := e.ValueFrom.SecretKeyRef; want[e.Name] != ref.Name+"/"+ref.Key {
			t.Errorf("env %s from %s/%s; want %s", e.Name, ref.Name, ref.Key, want[e.Name])
		}
	}
	np := find[*networkingv1.NetworkPolicy](t, r, "networking.k8s.io/v1/NetworkPolicy", "rl")
	from := np.Spec.Ingress[0].From[0]
	if from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "gateways" || from.PodSelector.MatchLabels["app"] != "envoy" {
		t.Errorf("gateways %+v", from)
	}
	if d := find[*corev1.ConfigMap](t, r, "v1/ConfigMap", "rl-dashboard"); d.Namespace != "grafana" {
		t.Errorf("dashboard in namespace %q", d.Namespace)
	}
}

// The webhook's objects fit together: the configuration calls the
// Service, which reaches the container's port; the certificate is for
// the Service's name, in the Secret the Deployment mounts, and its CA is
// the one the API server is given.
func TestWebhookObjects(t *testing.T) {
	for _, file := range []string{"full-values.yaml", "webhook-only-values.yaml"} {
		t.Run(file, func(t *testing.T) {
			r := render(t, readValues(t, file, nil))
			name := "edge-sluice-webhook"
			if file == "full-values.yaml" {
				name = "rl-webhook"
			}
			cfg := find[*admissionregistrationv1.MutatingWebhookConfiguration](t, r,
				"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration", name)
			dep := find[*appsv1.Deployment](t, r, "apps/v1/Deployment", name)
			svc := find[*corev1.Service](t, r, "v1/Service", name)
			find[*corev1.ServiceAccount](t, r, "v1/ServiceAccount", name)
			c := dep.Spec.Template.Spec.Containers[0]
			if !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
				t.Errorf("the Service selects %v", svc.Spec.Selector)
			}
			if len(cfg.Webhooks) != 2 {
				t.Fatalf("%d webhook entries; want one for the pod label and one for the namespace label", len(cfg.Webhooks))
			}
			for _, w := range cfg.Webhooks {
				s := w.ClientConfig.Service
				if s == nil || s.Name != svc.Name || s.Namespace != namespace || s.Path == nil || *s.Path != "/inject" || s.Port == nil {
					t.Fatalf("%s: clientConfig %+v", w.Name, w.ClientConfig)
				}
				for _, p := range svc.Spec.Ports {
					if p.Port == *s.Port && containerPort(c, p.TargetPort.String()) != 8443 {
						t.Errorf("%s: port %d does not reach the webhook's 8443", w.Name, *s.Port)
					}
				}
				excluded := slices.ContainsFunc(w.NamespaceSelector.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool {
					return e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" &&
						slices.Contains(e.Values, "kube-system") && slices.Contains(e.Values, namespace)
				})
				if !excluded {
					t.Errorf("%s: namespaceSelector %+v does not leave out kube-system and %s", w.Name, w.NamespaceSelector, namespace)
				}
			}
			var secret string
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Secret != nil {
					secret = v.Secret.SecretName
				}
			}
			dns := svc.Name + "." + namespace + ".svc"
			switch file {
			case "full-values.yaml":
				cert := find[*cmv1.Certificate](t, r, "cert-manager.io/v1/Certificate", name)
				if cert.Spec.SecretName != secret || !slices.Contains(cert.Spec.DNSNames, dns) ||
					cert.Spec.IssuerRef.Kind != "ClusterIssuer" || cert.Spec.IssuerRef.Name != "internal-ca" {
					t.Errorf("certificate %+v; the Deployment mounts %s", cert.Spec, secret)
				}
				if got := cfg.Annotations["cert-manager.io/inject-ca-from"]; got != namespace+"/"+cert.Name {
					t.Errorf("CA injection from %q", got)
				}
				if *cfg.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail ||
					!slices.Contains(cfg.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values, "monitoring") {
					t.Errorf("failurePolicy and excluded namespaces from the values: %+v", cfg.Webhooks[0])
				}
			case "webhook-only-values.yaml":
				s := find[*corev1.Secret](t, r, "v1/Secret", secret)
				checkGeneratedCert(t, s, cfg.Webhooks[0].ClientConfig.CABundle, dns)
			}
		})
	}
}

// checkGeneratedCert: the API server, trusting caBundle, accepts the
// Secret's certificate for the Service's name.
func checkGeneratedCert(t *testing.T, s *corev1.Secret, caBundle []byte, dns string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		t.Fatalf("caBundle holds no certificate: %q", caBundle)
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: dns, Roots: roots}); err != nil {
		t.Errorf("the API server would refuse the webhook's certificate for %s: %v", dns, err)
	}
	if len(s.Data["tls.key"]) == 0 {
		t.Error("no tls.key")
	}
}

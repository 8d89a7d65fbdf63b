package deploy

import (
	"bytes"
	"flag"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/internal/settings"
)

var update = flag.Bool("update", false, "regenerate the sidecar components from the injector")

// render is `kustomize build dir`, in process, every document decoded
// strictly into its Go type.
func render(t *testing.T, dir string) ([]injecttest.Object, []byte) {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := injecttest.DecodeStrict(t, y)
	for _, o := range objs {
		if o.Obj == nil {
			t.Errorf("%s: %s %s has no Go type to be checked against", dir, o.Kind, o.Name)
		}
	}
	return objs, y
}

// The components' sidecar.yaml is the injector's output for an empty
// workload, so that kustomize users, `sluice inject` and the webhook get
// the same container.
func TestComponentsAreGenerated(t *testing.T) {
	plain := inject.DefaultSettings()
	plain.Native = false
	plain.Sidecar.ShutdownDelay = plainShutdownDelay
	for dir, s := range map[string]inject.Settings{"sidecar/base": inject.DefaultSettings(), "sidecar/plain": plain} {
		const skeleton = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sluice-sidecar\n" +
			"spec:\n  template:\n    metadata: {}\n    spec: {}\n"
		var out bytes.Buffer
		out.WriteString("# Generated from package inject by `go generate ./deploy`: do not edit.\n" +
			"# A strategic merge patch that kustomization.yaml applies to its targets.\n")
		if err := s.Documents(strings.NewReader(skeleton), &out, func(w string) { t.Error(w) }); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "sidecar.yaml")
		if *update {
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, out.Bytes()) {
			t.Errorf("%s is not the injector's rendering (run go generate ./deploy): %v", path, err)
		}
	}
}

// plainShutdownDelay keeps a plain sidecar container serving while the
// application, stopped at the same moment, finishes its last requests.
const plainShutdownDelay = 5_000_000_000 // 5s

// Every kustomization renders, and every document in it decodes strictly.
func TestEveryKustomizationRenders(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte("\nkind: Component")) { // a component renders only inside an overlay
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sidecar/examples/central", "sidecar/examples/demo", "sidecar/examples/demo-app",
		"sidecar/examples/demo-plain", "sidecar/examples/podmonitor", "testdata/workloads", "webhook"}
	if !slices.Equal(dirs, want) {
		t.Errorf("kustomizations %v; want %v", dirs, want)
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) { render(t, dir) })
	}
}

// sidecarOf is the container named sluice of a workload, in its init
// containers or its containers.
func sidecarOf(t *testing.T, spec corev1.PodSpec) (corev1.Container, bool) {
	t.Helper()
	for i, c := range spec.InitContainers {
		if c.Name == inject.ContainerName {
			if i != 0 && len(spec.InitContainers) == 1 {
				t.Errorf("sluice is init container %d", i)
			}
			return c, true
		}
	}
	for _, c := range spec.Containers {
		if c.Name == inject.ContainerName {
			return c, false
		}
	}
	t.Fatalf("no container named sluice in %+v", spec)
	return corev1.Container{}, false
}

// flagsOf parses a container's args and env the way the binary does.
func flagsOf(t *testing.T, c corev1.Container, env map[string]string) settings.Config {
	t.Helper()
	cfg := settings.Default()
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	cfg.Register(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the binary would refuse its args %v: %v", c.Args, err)
	}
	if err := settings.ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// checkSidecar checks what every rendered sidecar must be.
func checkSidecar(t *testing.T, objs []injecttest.Object, spec corev1.PodSpec, native bool) corev1.Container {
	t.Helper()
	c, inInit := sidecarOf(t, spec)
	if inInit != native {
		t.Errorf("sluice in init containers: %v; want %v", inInit, native)
	}
	if native && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Errorf("native sidecar restartPolicy %v; want Always", c.RestartPolicy)
	}
	if !native && c.RestartPolicy != nil {
		t.Errorf("a plain container with restartPolicy %v", *c.RestartPolicy)
	}
	env := containertest.ResolveEnv(t, objs, c)
	cfg := flagsOf(t, c, env)
	host, port, err := net.SplitHostPort(cfg.AdminListen)
	if err != nil || host != "0.0.0.0" && host != "" {
		t.Errorf("--admin-listen %q: the kubelet's probes and Prometheus must reach it", cfg.AdminListen)
	}
	if h, _, _ := net.SplitHostPort(cfg.Listen); h != "127.0.0.1" {
		t.Errorf("--listen %q: the RESP port must stay on loopback", cfg.Listen)
	}
	probes := map[string]*corev1.Probe{"/healthz startup": c.StartupProbe, "/healthz liveness": c.LivenessProbe, "/readyz readiness": c.ReadinessProbe}
	for want, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe missing", want)
			continue
		}
		if path, _, _ := strings.Cut(want, " "); p.HTTPGet.Path != path {
			t.Errorf("%s probe path %q", want, p.HTTPGet.Path)
		}
		if got := containertest.ContainerPort(c, p.HTTPGet.Port.String()); got != port {
			t.Errorf("%s probe port %s is %s; --admin-listen's is %s", want, p.HTTPGet.Port.String(), got, port)
		}
	}
	sc := c.SecurityContext
	if sc == nil || !deref(sc.RunAsNonRoot) || sc.RunAsUser == nil || *sc.RunAsUser == 0 || deref(sc.AllowPrivilegeEscalation) ||
		!deref(sc.ReadOnlyRootFilesystem) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		len(sc.Capabilities.Add) != 0 || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("securityContext %+v is not the restrictive one", sc)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "redis://") || strings.HasPrefix(a, "--upstream=") || strings.HasPrefix(a, "--requirepass") {
			t.Errorf("a secret in the args: %s", a)
		}
	}
	if up := env["SLUICE_UPSTREAM"]; !strings.HasPrefix(up, "redis://") {
		t.Errorf("SLUICE_UPSTREAM from the Secret is %q", up)
	}
	if !strings.HasPrefix(cfg.Policies, inject.PoliciesDir+"/") {
		t.Errorf("--policies %q is not in the mounted ConfigMap's directory", cfg.Policies)
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("mount %s uses subPath: ConfigMap updates would never reach it", m.Name)
		}
	}
	containertest.MountedFiles(t, objs, spec, c, t.TempDir()) // the policies file is in the ConfigMap
	return c
}

func deref(b *bool) bool { return b != nil && *b }

func TestDemoOverlay(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/demo")
	web := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "web")
	if web == nil {
		t.Fatal("no Deployment web")
	}
	checkSidecar(t, objs, web.Spec.Template.Spec, true)
	ann := web.Spec.Template.Annotations
	if ann[inject.StatusKey] == "" || ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9380" {
		t.Errorf("pod annotations %v", ann)
	}
	redis := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "redis")
	if redis == nil || len(redis.Spec.Template.Spec.InitContainers)+len(redis.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("the demo's Redis got a sidecar: %+v", redis)
	}
}

func TestDemoPlainOverlay(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/demo-plain")
	web := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "web")
	c := checkSidecar(t, objs, web.Spec.Template.Spec, false)
	if cfg := flagsOf(t, c, nil); cfg.ShutdownDelay != plainShutdownDelay {
		t.Errorf("plain sidecar --shutdown-delay %v", cfg.ShutdownDelay)
	}
	// First, so that the kubelet starts it before the application.
	if cs := web.Spec.Template.Spec.Containers; len(cs) != 2 || cs[0].Name != "sluice" || cs[1].Name != "web" {
		t.Errorf("containers %v; want sluice, then the application", cs)
	}
}

func TestComponentTargetsEveryLabelledWorkload(t *testing.T) {
	objs, _ := render(t, "testdata/workloads")
	sts := injecttest.Find[*appsv1.StatefulSet](objs, "apps/v1/StatefulSet", "db-client")
	ds := injecttest.Find[*appsv1.DaemonSet](objs, "apps/v1/DaemonSet", "agent")
	other := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "not-labelled")
	if sts == nil || ds == nil || other == nil {
		t.Fatal("a workload is missing")
	}
	for _, spec := range []corev1.PodSpec{sts.Spec.Template.Spec, ds.Spec.Template.Spec} {
		if _, native := sidecarOf(t, spec); !native {
			t.Error("not a native sidecar")
		}
	}
	if n := len(sts.Spec.Template.Spec.InitContainers); n != 2 {
		t.Errorf("StatefulSet init containers %d; want setup and sluice", n)
	}
	if len(other.Spec.Template.Spec.InitContainers) != 0 || other.Spec.Template.Annotations[inject.StatusKey] != "" {
		t.Errorf("the unlabelled Deployment was changed: %+v", other.Spec.Template)
	}
}

func TestWebhookManifests(t *testing.T) {
	objs, _ := render(t, "webhook")
	cfg := injecttest.Find[*admissionregistrationv1.MutatingWebhookConfiguration](objs,
		"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration", "sluice-injector")
	dep := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "sluice-webhook")
	svc := injecttest.Find[*corev1.Service](objs, "v1/Service", "sluice-webhook")
	cert := injecttest.Find[*cmv1.Certificate](objs, "cert-manager.io/v1/Certificate", "sluice-webhook")
	issuer := injecttest.Find[*cmv1.Issuer](objs, "cert-manager.io/v1/Issuer", "sluice-selfsigned")
	sa := injecttest.Find[*corev1.ServiceAccount](objs, "v1/ServiceAccount", "sluice-webhook")
	if cfg == nil || dep == nil || svc == nil || cert == nil || issuer == nil || sa == nil {
		t.Fatal("a webhook object is missing")
	}
	ns := dep.Namespace
	if ns == "" || svc.Namespace != ns || cert.Namespace != ns || sa.Namespace != ns {
		t.Errorf("namespaces: deployment %q, service %q, certificate %q", ns, svc.Namespace, cert.Namespace)
	}
	if got := cfg.Annotations["cert-manager.io/inject-ca-from"]; got != ns+"/"+cert.Name {
		t.Errorf("CA injection annotation %q; want %s/%s", got, ns, cert.Name)
	}
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhook entries; want one for the pod label and one for the namespace label", len(cfg.Webhooks))
	}
	selects := map[string]bool{}
	for _, w := range cfg.Webhooks {
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore ||
			w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy ||
			w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			w.TimeoutSeconds == nil || *w.TimeoutSeconds > 10 || !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
			t.Errorf("%s: policies %+v", w.Name, w)
		}
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) ||
			!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
			t.Errorf("%s: rules %+v", w.Name, w.Rules)
		}
		s := w.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != ns || s.Path == nil || *s.Path != "/inject" || s.Port == nil {
			t.Fatalf("%s: clientConfig %+v", w.Name, w.ClientConfig)
		}
		// The Service's port leads to the container port the webhook listens on.
		var target string
		for _, p := range svc.Spec.Ports {
			if p.Port == *s.Port {
				target = containertest.ContainerPort(dep.Spec.Template.Spec.Containers[0], p.TargetPort.String())
			}
		}
		if target != "8443" {
			t.Errorf("%s: port %d reaches container port %q; want 8443", w.Name, *s.Port, target)
		}
		excluded := false
		for _, e := range w.NamespaceSelector.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" && slices.Contains(e.Values, "kube-system") && slices.Contains(e.Values, ns) {
				excluded = true
			}
			if e.Key == inject.InjectKey && e.Operator == "In" && slices.Equal(e.Values, []string{"enabled"}) {
				selects["namespace"] = true
			}
		}
		if !excluded {
			t.Errorf("%s: namespaceSelector %+v does not exclude kube-system and %s", w.Name, w.NamespaceSelector, ns)
		}
		for _, e := range w.ObjectSelector.MatchExpressions {
			if e.Key == inject.InjectKey && e.Operator == "In" && slices.Equal(e.Values, []string{"true"}) {
				selects["pod"] = true
			}
			if e.Key == inject.InjectKey && e.Operator == "NotIn" && !slices.Contains(e.Values, "false") {
				t.Errorf("%s: a pod labelled false is not opted out", w.Name)
			}
		}
	}
	if !selects["pod"] || !selects["namespace"] {
		t.Errorf("opt-in selectors found: %v", selects)
	}
	// cert-manager's certificate: for the Service's DNS name, into the
	// Secret the Deployment mounts, from the Issuer in this kustomization.
	if !slices.Contains(cert.Spec.DNSNames, svc.Name+"."+ns+".svc") || cert.Spec.IssuerRef.Name != issuer.Name ||
		cert.Spec.IssuerRef.Kind != "Issuer" || issuer.Spec.SelfSigned == nil {
		t.Errorf("certificate %+v, issuer %+v", cert.Spec, issuer.Spec)
	}
	mounted := false
	for _, v := range dep.Spec.Template.Spec.Volumes {
		mounted = mounted || v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName
	}
	if !mounted {
		t.Errorf("the Deployment does not mount the certificate's Secret %s", cert.Spec.SecretName)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "webhook" || c.Image != inject.DefaultImage {
		t.Errorf("webhook container %s %v; want image %s running webhook", c.Image, c.Args, inject.DefaultImage)
	}
	if !slices.Contains(c.Args, "--sidecar-image="+inject.DefaultImage) {
		t.Errorf("the webhook injects another version than its own: %v", c.Args)
	}
	runWebhook(t, dep)
}

func TestCentralManifest(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/central")
	dep := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "sluice")
	svc := injecttest.Find[*corev1.Service](objs, "v1/Service", "sluice")
	if dep == nil || svc == nil {
		t.Fatal("no Deployment or Service sluice")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != inject.DefaultImage {
		t.Errorf("image %s; want %s", c.Image, inject.DefaultImage)
	}
	// The gateway doors' flags and ports, as issue #14 fixes them.
	for flag, port := range map[string]string{"--grpc-listen": "8081", "--http-listen": "8080", "--admin-listen": "9380"} {
		if !slices.Contains(c.Args, flag+"=0.0.0.0:"+port) {
			t.Errorf("args %v lack %s=0.0.0.0:%s", c.Args, flag, port)
		}
	}
	for _, p := range svc.Spec.Ports {
		if got := containertest.ContainerPort(c, p.TargetPort.String()); got != strconv.Itoa(int(p.Port)) {
			t.Errorf("Service port %s %d reaches container port %s", p.Name, p.Port, got)
		}
	}
	sc := c.SecurityContext
	if sc == nil || !deref(sc.ReadOnlyRootFilesystem) || !deref(sc.RunAsNonRoot) || deref(sc.AllowPrivilegeEscalation) {
		t.Errorf("securityContext %+v", sc)
	}
	// The settings as the binary reads them, with the addresses as written
	// (TestCentralRuns moves them to loopback): the doors' protected mode
	// must accept them, or the pod never starts.
	env := containertest.ResolveEnv(t, objs, c)
	cfg := settings.Default()
	fset := flag.NewFlagSet("sluice", flag.ContinueOnError)
	cfg.Register(fset)
	if err := fset.Parse(c.Args); err != nil {
		t.Fatalf("args %v: %v", c.Args, err)
	}
	if err := settings.ApplyEnv(fset, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the binary refuses the central container's settings: %v", err)
	}
}

func TestPodMonitor(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/podmonitor")
	pm := injecttest.Find[*monitoringv1.PodMonitor](objs, "monitoring.coreos.com/v1/PodMonitor", "sluice-sidecars")
	if pm == nil {
		t.Fatal("no PodMonitor")
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil ||
		*pm.Spec.PodMetricsEndpoints[0].Port != inject.AdminPortName || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" ||
		!pm.Spec.NamespaceSelector.Any {
		t.Errorf("PodMonitor %+v", pm.Spec)
	}
}

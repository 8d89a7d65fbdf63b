package helm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/webhook"
)

// A pod as a ReplicaSet creates it, opted in, with an application
// container and an init container of its own.
const appPod = `apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: shop
  labels: {app: web, sluice.io/inject: "true"}
spec:
  initContainers:
  - name: migrate
    image: migrate:1
  containers:
  - name: web
    image: nginx:1.27
`

// The sidecar the chart's webhook injects is `sluice inject`'s for the
// same settings: the chart's webhook Deployment, its args as rendered, is
// run (in process, on free ports, with a test certificate in the mounted
// Secret's place) and sent the pod, and its patched pod must be exactly
// what `sluice inject` makes of the pod with the chart's webhook.sidecar
// values as flags.
func TestChartWebhookInjectsSluiceInjectsSidecar(t *testing.T) {
	for _, tc := range []struct {
		file string
		set  map[string]any
	}{
		{"full-values.yaml", nil},
		{"webhook-only-values.yaml", nil},
		// The defaults of values.yaml: sluice inject's own.
		{"default-values.yaml", map[string]any{"webhook.enabled": true}},
		// A number the template engine holds as a float.
		{"default-values.yaml", map[string]any{"webhook.enabled": true, "webhook.sidecar.batch-max": 2048}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := render(t, readValues(t, tc.file, tc.set))
			var dep *appsv1.Deployment
			for _, o := range r.objs {
				if d, ok := o.Obj.(*appsv1.Deployment); ok && strings.HasSuffix(d.Name, "-webhook") {
					dep = d
				}
			}
			if dep == nil {
				t.Fatalf("no webhook Deployment: %v", kinds(r))
			}
			c := dep.Spec.Template.Spec.Containers[0]
			if len(c.Args) == 0 || c.Args[0] != "webhook" || len(c.Command) != 0 {
				t.Fatalf("the webhook container runs %v %v; want the image's binary with webhook", c.Command, c.Args)
			}
			fromWebhook := injectByWebhook(t, c.Args[1:])
			fromInject := injectByCLI(t, sidecarFlags(t, r))
			if !bytes.Equal(fromWebhook, fromInject) {
				t.Errorf("the chart's webhook injects\n%s\nsluice inject with the same values makes\n%s", fromWebhook, fromInject)
			}
			if !bytes.Contains(fromInject, []byte(`"name":"sluice"`)) {
				t.Fatalf("no sidecar injected: %s", fromInject)
			}
		})
	}
}

// sidecarFlags are the chart's webhook.sidecar values as `sluice inject`
// flags: the same names, the image defaulting to the chart's.
func sidecarFlags(t *testing.T, r rendering) []string {
	t.Helper()
	w, err := r.values.Table("webhook.sidecar")
	if err != nil {
		t.Fatal(err)
	}
	img, err := r.values.Table("image")
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprint(img["tag"])
	if tag == "" {
		tag = appVersion(t)
	}
	flags := []string{"--image=" + fmt.Sprint(img["repository"]) + ":" + tag}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range w {
			if !yield(k) {
				return
			}
		}
	}) {
		v := w[k]
		if f, ok := v.(float64); ok {
			v = strconv.FormatFloat(f, 'f', -1, 64)
		}
		flags = append(flags, fmt.Sprintf("--%s=%v", k, v))
	}
	return flags
}

func appVersion(t *testing.T) string {
	t.Helper()
	return loadChart(t).Metadata.AppVersion
}

// injectByCLI is `sluice inject` with flags, run on appPod, as JSON.
func injectByCLI(t *testing.T, flags []string) []byte {
	t.Helper()
	var out, errs bytes.Buffer
	if code := inject.Main(flags, strings.NewReader(appPod), &out, &errs); code != 0 {
		t.Fatalf("sluice inject %v: exit %d: %s", flags, code, errs.String())
	}
	j, err := yaml.YAMLToJSON(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return canonical(t, j)
}

// canonical is JSON with sorted keys and no spaces, for comparison.
func canonical(t *testing.T, j []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// injectByWebhook runs `sluice webhook` with the rendered args, moved to
// free loopback ports and a test certificate, sends it appPod in a CREATE
// review over TLS, and returns the pod with its patch applied.
func injectByWebhook(t *testing.T, args []string) []byte {
	t.Helper()
	dir := t.TempDir()
	pool := x509.NewCertPool()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	injecttest.WriteCert(t, crt, key, 1, pool)
	addr := "127.0.0.1:" + containertest.FreePort(t)
	var run []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--listen="):
			a = "--listen=" + addr
		case strings.HasPrefix(a, "--admin-listen="):
			a = "--admin-listen=off"
		case strings.HasPrefix(a, "--tls-cert="):
			a = "--tls-cert=" + crt
		case strings.HasPrefix(a, "--tls-key="):
			a = "--tls-key=" + key
		}
		run = append(run, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stderr containertest.SyncBuffer
	exited := make(chan struct{}) // closed when Main has returned code
	var code int
	go func() { code = webhook.Main(ctx, run, io.Discard, &stderr); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if code != 0 {
			t.Errorf("sluice webhook %v: exit %d: %s", run, code, stderr.String())
		}
	})

	pod, err := yaml.YAMLToJSON([]byte(appPod))
	if err != nil {
		t.Fatal(err)
	}
	review := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",
		"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
		"namespace":"shop","operation":"CREATE","userInfo":{},"object":%s}}`, pod)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var resp *http.Response
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err = client.Post("https://"+addr+"/inject", "application/json", strings.NewReader(review))
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("sluice webhook %v exited: %s", run, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook never answered: %v; output: %s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil || !out.Response.Allowed {
		t.Fatalf("review answer %d: %s (%v)", resp.StatusCode, body, err)
	}
	p, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatalf("the patch is no JSON patch: %v: %s", err, out.Response.Patch)
	}
	patched, err := p.Apply(pod)
	if err != nil {
		t.Fatalf("the patch does not apply: %v: %s", err, out.Response.Patch)
	}
	return canonical(t, patched)
}

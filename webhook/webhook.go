// Package webhook is Sluice's mutating admission webhook: the Kubernetes
// API server sends it each pod being created (an AdmissionReview), and it
// answers with the JSON patch that package inject computes, the same one
// `sluice inject` applies to files. Which pods it is sent is the
// MutatingWebhookConfiguration's business (deploy/webhook); the server
// only skips the ones opted out or already injected.
//
// Its TLS certificate is read from files on every handshake that finds
// them changed, so a certificate renewed by cert-manager is served without
// a restart.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-rl/sluice/inject"
)

// DefaultMaxBody is the largest review read. The API server's own limit on
// an object is 3 MiB; a review holds the object and, on update, the old one.
const DefaultMaxBody = 7 << 20

// Config configures a Handler.
type Config struct {
	Settings inject.Settings // the sidecar to inject; must be valid
	Logger   *slog.Logger    // nil: slog.Default()
	MaxBody  int64           // largest request body; 0: DefaultMaxBody
	Registry *prometheus.Registry
}

// Handler serves the admission reviews at /inject.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	reviews  *prometheus.CounterVec
	duration prometheus.Histogram
}

// New makes a Handler, registering its metrics with cfg.Registry (when set).
func New(cfg Config) (*Handler, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	h := &Handler{cfg: cfg, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.reviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_webhook_reviews_total",
		Help: "Admission reviews answered, by outcome: injected, skipped, denied (a setting that cannot be honoured) or invalid (no review could be read).",
	}, []string{"outcome"})
	h.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_webhook_review_duration_seconds",
		Help:    "Time to answer one admission review.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
	})
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(h.reviews); err != nil {
			return nil, err
		}
		if err := cfg.Registry.Register(h.duration); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// ServeHTTP answers one AdmissionReview. A request that holds no review
// this server can read gets an HTTP error with the reason (and the API
// server applies the webhook's failurePolicy); a review whose pod cannot
// be injected as asked is denied with the reason.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.duration.Observe(time.Since(start).Seconds()) }()
	review, status, err := h.read(w, r)
	if err != nil {
		h.reviews.WithLabelValues("invalid").Inc()
		h.log.Warn("webhook: unreadable review", "err", err, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), status)
		return
	}
	resp, outcome := h.review(review.Request)
	h.reviews.WithLabelValues(outcome).Inc()
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// read decodes the request's review, or says what is wrong with it and
// the HTTP status that goes with that.
func (h *Handler) read(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s: an admission review is a POST", r.Method)
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: want application/json", r.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("review larger than %d bytes", h.cfg.MaxBody)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the review: %v", err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("not an AdmissionReview: %v", err)
	}
	if want := admissionv1.SchemeGroupVersion.String(); review.APIVersion != want || review.Kind != "AdmissionReview" {
		return nil, http.StatusBadRequest, fmt.Errorf("apiVersion %q, kind %q: want %s AdmissionReview (set admissionReviewVersions: [v1])",
			review.APIVersion, review.Kind, want)
	}
	if review.Request == nil {
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview has no request")
	}
	return &review, 0, nil
}

// review decides on one request: the response and the outcome to count.
func (h *Handler) review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(err error) (*admissionv1.AdmissionResponse, string) {
		h.log.Info("webhook: pod denied", "namespace", req.Namespace, "name", podName(req), "err", err)
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest,
			Reason: metav1.StatusReasonBadRequest, Message: "sluice injection: " + err.Error()}
		return resp, "denied"
	}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.Operation != admissionv1.Create {
		resp.Warnings = []string{fmt.Sprintf("sluice injection: ignored %s of %s: only pods being created are injected", req.Operation, req.Kind.Kind)}
		return resp, "skipped"
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(fmt.Errorf("reading the pod: %v", err))
	}
	res, err := h.cfg.Settings.Pod(pod.ObjectMeta, pod.Spec)
	if err != nil {
		return deny(err)
	}
	if res.Warning != "" {
		resp.Warnings = []string{"sluice injection: " + res.Warning}
	}
	if len(res.Patch) == 0 {
		h.log.Debug("webhook: pod skipped", "namespace", req.Namespace, "name", podName(req), "why", res.Skipped)
		return resp, "skipped"
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return deny(err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	h.log.Debug("webhook: pod injected", "namespace", req.Namespace, "name", podName(req))
	return resp, "injected"
}

// podName is the pod's name, or its generateName for one a controller
// creates, whose name the API server has yet to choose.
func podName(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	var m struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &m)
	return m.Metadata.GenerateName + "*"
}

// Mux serves the reviews at /inject and, for the probes, /healthz.
func (h *Handler) Mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/inject", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// AdminMux serves /metrics from reg and /healthz, in plain HTTP for
// Prometheus and the kubelet.
func AdminMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

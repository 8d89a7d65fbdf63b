// Package injecttest checks rendered Kubernetes YAML the way the API
// server would read it: each document decoded strictly (an unknown or
// duplicated field is an error) into its project's Go type. It serves the
// injector's, the webhook's and the manifests' tests.
package injecttest

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/internal/testca"
)

// types are the kinds the project's manifests and test inputs use.
var types = map[string]func() any{
	"v1/Pod":                             func() any { return &corev1.Pod{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"v1/List":                            func() any { return &metav1.List{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"apps/v1/DaemonSet":                  func() any { return &appsv1.DaemonSet{} },
	"apps/v1/ReplicaSet":                 func() any { return &appsv1.ReplicaSet{} },
	"batch/v1/Job":                       func() any { return &batchv1.Job{} },
	"batch/v1/CronJob":                   func() any { return &batchv1.CronJob{} },
	"networking.k8s.io/v1/Ingress":       func() any { return &networkingv1.Ingress{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
	"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": func() any {
		return &admissionregistrationv1.MutatingWebhookConfiguration{}
	},
	"monitoring.coreos.com/v1/PodMonitor": func() any { return &monitoringv1.PodMonitor{} },
	"cert-manager.io/v1/Certificate":      func() any { return &cmv1.Certificate{} },
	"cert-manager.io/v1/Issuer":           func() any { return &cmv1.Issuer{} },
}

// Object is one decoded document.
type Object struct {
	Kind string // apiVersion/kind
	Name string
	Obj  any // a pointer to the kind's Go type; nil for a kind not in the table
}

// DecodeStrict decodes every document of a multi-document YAML stream,
// failing the test on a document that does not decode strictly. A kind
// with no Go type here (a test's made-up custom resource) is returned
// with a nil Obj.
func DecodeStrict(tb testing.TB, stream []byte) []Object {
	tb.Helper()
	objs, err := decode(stream)
	if err != nil {
		tb.Fatal(err)
	}
	return objs
}

// decode is DecodeStrict returning its error.
func decode(stream []byte) ([]Object, error) { return DecodeWith(stream, types, false) }

// DecodeWith splits a stream of YAML documents and decodes each strictly,
// as the API server would read it, into the Go type known gives its kind
// (apiVersion/kind). A kind known has no type for is kept undecoded, or,
// with all, is an error: a rendering whose every object must be checked.
func DecodeWith(stream []byte, known map[string]func() any, all bool) ([]Object, error) {
	var objs []Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %v", n, err)
		}
		if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			continue
		}
		var head metav1.PartialObjectMetadata
		if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &head); err != nil {
			return nil, fmt.Errorf("document %d: %v", n, err)
		}
		o := Object{Kind: head.APIVersion + "/" + head.Kind, Name: head.Name}
		mk, ok := known[o.Kind]
		if !ok && all {
			return nil, fmt.Errorf("document %d: %s %s has no Go type to be checked against", n, o.Kind, o.Name)
		}
		if ok {
			o.Obj = mk()
			if err := Strict(j, o.Obj); err != nil {
				return nil, fmt.Errorf("document %d (%s %s): %v", n, o.Kind, o.Name, err)
			}
			if l, ok := o.Obj.(*metav1.List); ok {
				for i, it := range l.Items {
					items, err := DecodeWith(it.Raw, known, all)
					if err != nil {
						return nil, fmt.Errorf("document %d item %d: %v", n, i, err)
					}
					objs = append(objs, items...)
				}
			}
		}
		objs = append(objs, o)
	}
}

// Strict decodes JSON into v as the API server does, with unknown and
// duplicated fields as errors.
func Strict(j []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Find is the first object of kind (apiVersion/kind) and name, or nil.
func Find[T any](objs []Object, kind, name string) T {
	var zero T
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			if v, ok := o.Obj.(T); ok {
				return v
			}
		}
	}
	return zero
}

// WriteCert writes a fresh certificate for 127.0.0.1 with the given
// serial number, and its key, as PEM files at certFile and keyFile, each
// written beside and renamed into place as the kubelet does, and adds the
// CA that signed it to pool.
func WriteCert(tb testing.TB, certFile, keyFile string, serial int64, pool *x509.CertPool) {
	tb.Helper()
	ca := testca.New(tb)
	ca.Serial = serial
	ca.Issue(tb, "sluice-webhook").Write(tb, certFile, keyFile)
	pool.AddCert(ca.TLS.Leaf)
}

package inject

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// templatePaths are where each kind that runs pods keeps its pod: ""
// for a Pod itself.
var templatePaths = map[string][]string{
	"Pod":                   nil,
	"Deployment":            {"spec", "template"},
	"StatefulSet":           {"spec", "template"},
	"DaemonSet":             {"spec", "template"},
	"ReplicaSet":            {"spec", "template"},
	"ReplicationController": {"spec", "template"},
	"Job":                   {"spec", "template"},
	"PodTemplate":           {"template"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template"},
}

// Documents reads YAML documents (any number, separated by ---; a
// kind: List's items each count) and writes them with the sidecar added
// to every pod and pod template, each as Pod decides. A document with no
// pod in it, or whose pods are all skipped, is written exactly as it was
// read; one that changes is written anew (keys sorted, comments lost).
// warn gets one line for each pod left as it is that the user may have
// meant to be injected. An error names the document.
func (s Settings) Documents(r io.Reader, w io.Writer, warn func(string)) error {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	first := true
	for n := 1; ; n++ {
		raw, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		out, err := s.document(raw, warn)
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(out)) == 0 {
			continue
		}
		if !first {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		first = false
		if !bytes.HasSuffix(out, []byte("\n")) {
			out = append(out, '\n')
		}
		if _, err := w.Write(bytes.TrimPrefix(out, []byte("---\n"))); err != nil {
			return err
		}
	}
}

// document is one YAML document with the sidecar injected, or raw itself
// when nothing changed.
func (s Settings) document(raw []byte, warn func(string)) ([]byte, error) {
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(bytes.TrimSpace(j), []byte("{")) {
		return raw, nil // comments only, or not an object: not ours to judge
	}
	patched, changed, err := s.object(j, "", warn)
	if err != nil || !changed {
		return raw, err
	}
	return yaml.JSONToYAML(patched)
}

// object injects into one object's JSON, at the pointer prefix within a
// List (for messages), reporting whether it changed.
func (s Settings) object(j []byte, where string, warn func(string)) ([]byte, bool, error) {
	var head struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return nil, false, err
	}
	name := head.Kind + " " + head.Metadata.Name
	if head.Metadata.Namespace != "" {
		name = head.Kind + " " + head.Metadata.Namespace + "/" + head.Metadata.Name
	}
	if where != "" {
		name = where + " (" + name + ")"
	}
	if head.Kind == "List" || strings.HasSuffix(head.Kind, "List") && head.Items != nil {
		return s.list(j, head.Items, name, warn)
	}
	path, ok := templatePaths[head.Kind]
	if !ok {
		return j, false, nil
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil {
		return nil, false, err
	}
	var tmpl any = obj
	for _, k := range path {
		m, _ := tmpl.(map[string]any)
		if tmpl = m[k]; tmpl == nil {
			return nil, false, fmt.Errorf("%s has no %s", name, strings.Join(path, "."))
		}
	}
	if m, _ := tmpl.(map[string]any); m["spec"] == nil {
		// The patch adds to the pod's spec; without one the JSON patch
		// library's "doc is missing path" is all the user would see.
		where := strings.Join(append(slices.Clone(path), "spec"), ".")
		return nil, false, fmt.Errorf("%s has no %s: a pod needs one, with its containers", name, where)
	}
	tj, err := json.Marshal(tmpl)
	if err != nil {
		return nil, false, err
	}
	var pod struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec    `json:"spec"`
	}
	if err := json.Unmarshal(tj, &pod); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	res, err := s.Pod(pod.Metadata, pod.Spec)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	if res.Warning != "" {
		warn(name + ": " + res.Warning)
	}
	if len(res.Patch) == 0 {
		return j, false, nil
	}
	prefix := ""
	for _, k := range path {
		prefix += "/" + k
	}
	if !hasMetadata(tmpl) {
		// A template without metadata: the annotations' parent first.
		res.Patch = append([]Operation{{"add", "/metadata", map[string]any{}}}, res.Patch...)
	}
	patched, err := apply(j, Prefix(res.Patch, prefix))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return patched, true, nil
}

func hasMetadata(tmpl any) bool {
	m, _ := tmpl.(map[string]any)
	_, ok := m["metadata"]
	return ok
}

// list injects into each item of a List.
func (s Settings) list(j []byte, items []json.RawMessage, name string, warn func(string)) ([]byte, bool, error) {
	some := false
	for i, it := range items {
		out, changed, err := s.object(it, fmt.Sprintf("%s item %d", name, i), warn)
		if err != nil {
			return nil, false, err
		}
		if changed {
			items[i], some = out, true
		}
	}
	if !some {
		return j, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(j, &obj); err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(items)
	if err != nil {
		return nil, false, err
	}
	obj["items"] = b
	out, err := json.Marshal(obj)
	return out, true, err
}

// apply applies patch to the JSON document doc.
func apply(doc []byte, patch []Operation) ([]byte, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(b)
	if err != nil {
		return nil, err
	}
	return p.Apply(doc)
}

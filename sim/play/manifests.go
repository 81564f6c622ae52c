package play

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	"github.com/kubewalk/kubewalk/sim/apiserver"
)

var decoder = serializer.NewCodecFactory(apiserver.Scheme).UniversalDeserializer()

func yamlToJSON(b []byte) ([]byte, error) { return yaml.YAMLToJSON(b) }

// decodeManifests reads a YAML stream of objects as `kubectl apply -f -`
// does, with kubectl's errors for a document it cannot map: no kind, a
// kind the server does not serve, a namespace other than -n's.
func decodeManifests(stream, namespace string) ([]apiserver.Object, error) {
	var objs []apiserver.Object
	for _, doc := range splitDocuments(stream) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, kerrorf("error parsing STDIN: error converting YAML to JSON: %v", err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(js, &tm); err != nil {
			return nil, kerrorf("error parsing STDIN: %v", err)
		}
		if tm.Kind == "" || tm.APIVersion == "" {
			missing := "kind"
			if tm.APIVersion == "" {
				missing = "apiVersion"
			}
			return nil, kerrorf("error validating \"STDIN\": error validating data: %s not set; if you choose to ignore these errors, turn validation off with --validate=false", missing)
		}
		gv, _ := schema.ParseGroupVersion(tm.APIVersion)
		if !apiserver.Scheme.Recognizes(gv.WithKind(tm.Kind)) {
			return nil, kerrorf("resource mapping not found for name: %q namespace: %q from \"STDIN\": no matches for kind %q in version %q\nensure CRDs are installed first",
				tm.Metadata.Name, tm.Metadata.Namespace, tm.Kind, tm.APIVersion)
		}
		o, _, err := decoder.Decode(js, nil, nil)
		if err != nil {
			return nil, kerrorf("error parsing STDIN: %v", err)
		}
		obj, ok := o.(apiserver.Object)
		if !ok {
			return nil, kerrorf("error parsing STDIN: %s is not an object", tm.Kind)
		}
		if namespace != "" {
			if ns := obj.GetNamespace(); ns != "" && ns != namespace {
				return nil, kerrorf("the namespace from the provided object %q does not match the namespace %q. You must pass '--namespace=%s' to perform this operation.", ns, namespace, ns)
			}
			if k, ok := apiserver.LookupKind(apiserver.KindOf(obj)); ok && k.Namespaced {
				obj.SetNamespace(namespace)
			}
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// splitDocuments cuts a YAML stream at its "---" lines.
func splitDocuments(s string) []string {
	var docs []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if t := strings.TrimRight(line, " \t\r\n"); t == "---" || strings.HasPrefix(t, "--- ") {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(docs, cur.String())
}

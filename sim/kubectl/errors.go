package kubectl

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type apiStatus = apierrors.APIStatus

// statusText is kubectl's cmdutil.CheckErr for an API status: an invalid
// object as "The Kind \"name\" is invalid: field: detail" (a bullet list
// for several causes), Unauthorized as a login hint, anything else as
// "Error from server (Reason): message".
func statusText(st apiStatus) string {
	s := st.Status()
	if s.Reason == metav1.StatusReasonInvalid && s.Details != nil {
		prefix := "The request is invalid"
		if s.Details.Kind != "" || s.Details.Name != "" {
			prefix = fmt.Sprintf("The %s %q is invalid", s.Details.Kind, s.Details.Name)
		}
		causes := s.Details.Causes
		switch len(causes) {
		case 0:
			return prefix + "\n"
		case 1:
			return fmt.Sprintf("%s: %s: %s\n", prefix, causes[0].Field, causes[0].Message)
		}
		var b strings.Builder
		b.WriteString(prefix + ": \n")
		for _, c := range causes {
			fmt.Fprintf(&b, "* %s: %s\n", c.Field, c.Message)
		}
		return b.String()
	}
	switch {
	case s.Reason == metav1.StatusReasonUnauthorized:
		return fmt.Sprintf("error: You must be logged in to the server (%s)\n", s.Message)
	case s.Reason != "":
		return fmt.Sprintf("Error from server (%s): %s\n", s.Reason, s.Message)
	}
	return fmt.Sprintf("Error from server: %s\n", s.Message)
}

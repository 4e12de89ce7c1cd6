// Shared by the corpus's Java drivers (zookeeper, iq80-leveldb, rocksdb): compiled beside each
// driver's Driver.java by its build.sh. The driver protocol's plumbing only -- marks, the params
// and the checker's JSON input, quoting the answer -- nothing about any program.
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class Corpus {
    private Corpus() {}

    /** powercut-mark TEXT (begin:KEY, ack:KEY): a process of its own, as the protocol asks. */
    static void mark(String text) throws Exception {
        Process p = new ProcessBuilder("powercut-mark", text).inheritIO().start();
        int rc = p.waitFor();
        if (rc != 0) {
            throw new IllegalStateException("powercut-mark " + text + " exited " + rc);
        }
    }

    static Map<String, Object> parseParams(String text) {
        if (text == null || text.isBlank()) {
            return new LinkedHashMap<>();
        }
        return asObject(new Json(text).parse());
    }

    static int intParam(Map<String, Object> params, String name, int dflt) {
        Object v = params.get(name);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Number) {
            return ((Number) v).intValue();
        }
        return Integer.parseInt(v.toString().trim());
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> asObject(Object o) {
        if (!(o instanceof Map)) {
            throw new IllegalArgumentException("expected a JSON object");
        }
        return (Map<String, Object>) o;
    }

    static List<String> stringList(Object o) {
        List<String> out = new ArrayList<>();
        if (o instanceof List) {
            for (Object x : (List<?>) o) {
                out.add(x instanceof Double && ((Double) x) == Math.rint((Double) x)
                        ? Long.toString(((Double) x).longValue()) : String.valueOf(x));
            }
        }
        return out;
    }

    static String readAll(InputStream in) throws Exception {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        in.transferTo(buf);
        return buf.toString(StandardCharsets.UTF_8);
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        return sb.append('"').toString();
    }

    static final class Json {
        final String s;
        int p;

        Json(String s) {
            this.s = s;
        }

        Object parse() {
            Object v = value();
            ws();
            if (p != s.length()) {
                throw new IllegalArgumentException("trailing JSON at " + p);
            }
            return v;
        }

        void ws() {
            while (p < s.length() && Character.isWhitespace(s.charAt(p))) {
                p++;
            }
        }

        Object value() {
            ws();
            if (p >= s.length()) {
                throw new IllegalArgumentException("unexpected end of JSON");
            }
            char c = s.charAt(p);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                p++;
                ws();
                if (s.charAt(p) == '}') {
                    p++;
                    return m;
                }
                while (true) {
                    ws();
                    String k = string();
                    ws();
                    expect(':');
                    m.put(k, value());
                    ws();
                    if (s.charAt(p) == ',') {
                        p++;
                        continue;
                    }
                    expect('}');
                    return m;
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                p++;
                ws();
                if (s.charAt(p) == ']') {
                    p++;
                    return l;
                }
                while (true) {
                    l.add(value());
                    ws();
                    if (s.charAt(p) == ',') {
                        p++;
                        continue;
                    }
                    expect(']');
                    return l;
                }
            }
            if (c == '"') {
                return string();
            }
            if (s.startsWith("true", p)) {
                p += 4;
                return Boolean.TRUE;
            }
            if (s.startsWith("false", p)) {
                p += 5;
                return Boolean.FALSE;
            }
            if (s.startsWith("null", p)) {
                p += 4;
                return null;
            }
            int start = p;
            while (p < s.length() && "+-0123456789.eE".indexOf(s.charAt(p)) >= 0) {
                p++;
            }
            if (start == p) {
                throw new IllegalArgumentException("bad JSON at " + p);
            }
            return Double.parseDouble(s.substring(start, p));
        }

        void expect(char c) {
            if (p >= s.length() || s.charAt(p) != c) {
                throw new IllegalArgumentException("expected '" + c + "' at " + p);
            }
            p++;
        }

        String string() {
            expect('"');
            StringBuilder sb = new StringBuilder();
            while (true) {
                char c = s.charAt(p++);
                if (c == '"') {
                    return sb.toString();
                }
                if (c != '\\') {
                    sb.append(c);
                    continue;
                }
                char e = s.charAt(p++);
                switch (e) {
                    case 'n': sb.append('\n'); break;
                    case 't': sb.append('\t'); break;
                    case 'r': sb.append('\r'); break;
                    case 'b': sb.append('\b'); break;
                    case 'f': sb.append('\f'); break;
                    case 'u':
                        sb.append((char) Integer.parseInt(s.substring(p, p + 4), 16));
                        p += 4;
                        break;
                    default: sb.append(e);
                }
            }
        }
    }
}

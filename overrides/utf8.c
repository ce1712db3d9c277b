/* UTF-8 well-formedness, checked before parsing so that errors name the line and column of the
 * bad byte rather than a parser's byte offset. */
#include "overrides/overrides.h"

bool tr_utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            if (bad) *bad = i;
            return false;
        }
        if (i + len > n) {
            if (bad) *bad = i;
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                if (bad) *bad = i;
                return false;
            }
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            if (bad) *bad = i;
            return false;
        }
        i += len;
    }
    return true;
}

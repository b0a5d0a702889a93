// Text helpers shared by every input format: a token quoted for a message (control bytes
// escaped, so a NUL cannot cut a message short nor a raw byte reach the terminal), blank
// lines (skipped by every reader) and the UTF-8 byte order mark.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dlrm {

// `v` between single quotes, its first 40 bytes shown ("...'" after a longer one); a control
// byte (below 0x20, or 0x7f) is written \xNN and a backslash \\.
inline std::string quote_token(std::string_view v) {
  constexpr std::size_t kShow = 40;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : v.substr(0, kShow)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += c;
    }
  }
  return out + (v.size() > kShow ? "...'" : "'");
}

// Empty, or only spaces, tabs and carriage returns: no sample, not malformed.
constexpr bool is_blank_line(std::string_view line) noexcept {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// The UTF-8 byte order mark some editors write at a file's start.
inline constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

}  // namespace dlrm

#include "loom/common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(Utf8CharLength, MeasuresValidCharactersAndRejectsTheRest) {
  EXPECT_EQ(Utf8CharLength("a", 0), 1u);
  EXPECT_EQ(Utf8CharLength("\t", 0), 1u);
  EXPECT_EQ(Utf8CharLength("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(Utf8CharLength("\xE2\x82\xAC", 0), 3u);      // €
  EXPECT_EQ(Utf8CharLength("\xF0\x9F\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(Utf8CharLength("x\xC3\xA9", 1), 2u);
  // Truncated, a stray continuation byte, a bad continuation.
  EXPECT_EQ(Utf8CharLength("\xC3", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xE2\x82", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xA9", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xC3"
                           "a",
                           0),
            0u);
  // Overlong forms, surrogates, past U+10FFFF.
  EXPECT_EQ(Utf8CharLength("\xC0\xAF", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xE0\x80\xAF", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xF0\x80\x80\xAF", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xED\xA0\x80", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xF4\x90\x80\x80", 0), 0u);
  EXPECT_EQ(Utf8CharLength("\xF5\x80\x80\x80", 0), 0u);
}

TEST(IsValidUtf8, WholeStrings) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE2\x82\xAC"));
  EXPECT_FALSE(IsValidUtf8("caf\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(QuoteCharAt, QuotesAWholeCharacterOrNamesTheByte) {
  EXPECT_EQ(QuoteCharAt("a,b", 1), "','");
  EXPECT_EQ(QuoteCharAt("}\xC3\xA9", 1), "'\xC3\xA9'");
  EXPECT_EQ(QuoteCharAt("}\xC3", 1), "the byte 0xC3");
}

TEST(TruncateUtf8, NeverSplitsACharacter) {
  EXPECT_EQ(TruncateUtf8("abc", 5), "abc");
  EXPECT_EQ(TruncateUtf8("abc", 2), "ab");
  // "é€" is 2 + 3 bytes: cutting inside € keeps é only.
  EXPECT_EQ(TruncateUtf8("\xC3\xA9\xE2\x82\xAC", 4), "\xC3\xA9");
  EXPECT_EQ(TruncateUtf8("\xC3\xA9\xE2\x82\xAC", 1), "");
  EXPECT_EQ(TruncateUtf8("\xC3\xA9\xE2\x82\xAC", 5), "\xC3\xA9\xE2\x82\xAC");
}

}  // namespace
}  // namespace loom

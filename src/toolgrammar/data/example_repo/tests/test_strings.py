import unittest

from textkit.strings import is_palindrome, slugify, truncate, word_count


class StringsTest(unittest.TestCase):
    def test_slugify(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_palindrome(self):
        self.assertTrue(is_palindrome("racecar"))

    def test_palindrome_ignores_case(self):
        self.assertTrue(is_palindrome("A man, a plan, a canal: Panama"))

    def test_word_count(self):
        self.assertEqual(word_count("  one two   three "), 3)

    def test_truncate(self):
        self.assertEqual(truncate("abcdefghij", 6), "abc...")
        self.assertEqual(truncate("short", 10), "short")


if __name__ == "__main__":
    unittest.main()

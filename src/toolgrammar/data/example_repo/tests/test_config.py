import unittest

from textkit.config import DEFAULTS, parse_config


class ConfigTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(parse_config(""), DEFAULTS)

    def test_values_and_comments(self):
        config = parse_config("# settings\nmax_width = 100\nname = demo  # inline\n")
        self.assertEqual(config["max_width"], "100")
        self.assertEqual(config["name"], "demo")

    def test_bad_line(self):
        with self.assertRaises(ValueError):
            parse_config("no equals sign here")


if __name__ == "__main__":
    unittest.main()

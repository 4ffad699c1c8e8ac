"""French sentences for synthetic speech: templates filled from Faker's fr_FR word lists.

The templates are written to hold what makes French hard to transcribe: accents (é è ê à ù ç
ô î œ), elisions and apostrophes (l', d', qu', jusqu', aujourd'hui), liaisons (les‿enfants,
nous‿avons, très‿heureux, ont‿été), numbers, dates, times, ordinals, decimals and
percentages (written with digits or in words, said in words), and proper names (Faker's French
first names, surnames, towns, regions; its fr_FR lorem words for less predictable word order).
Sentences are distinct after normalisation, so a split can own its sentences.
"""

from __future__ import annotations

import random
import re
import string

from faker import Faker
from num2words import num2words

from sonfolio.speech.common.normalize import cardinal, feminine, normalize

TEMPLATES = (
    "{prenom} {nom} est arrivé à {ville} le {date}.",
    "Les enfants ont attendu {n_f} heures à l'hôpital de {ville}.",
    "Nous avons rendez-vous {jour} à {heure}.",
    "C'est aujourd'hui l'anniversaire de {prenom} : il a {age} ans.",
    "Qu'est-ce que {prenom} a répondu à l'inspecteur {nom} ?",
    "L'équipe de {ville} a gagné {score} à zéro dimanche dernier.",
    "Il n'y a plus d'eau chaude dans l'immeuble de {prenom}.",
    "Vous êtes allés en vacances dans la région {region} ?",
    "Mes amis habitent au {adresse}, à {ville}.",
    "Le train pour {ville} partira à {heure}, voie {n_f}.",
    "Elle s'est inscrite en {annee} à l'université de {ville}.",
    "{prenom} a couru {decimal} kilomètres en {minutes} minutes.",
    "Environ {pct} des électeurs de {ville} ont voté pour {prenom} {nom}.",
    "Le {ordinal} étage de l'immeuble est encore en travaux.",
    "Au {siecle} siècle, {ville} comptait à peine {milliers} habitants.",
    "Ils étaient très heureux d'être enfin ensemble à {ville}.",
    "Quand {prenom} est arrivé chez eux, tout le monde s'est levé.",
    "Dès que vous aurez fini, nous irons voir {prenom} à {ville}.",
    "{prenom} m'a dit qu'elle viendrait {jour} soir avec ses amis.",
    "Aujourd'hui, il fait {temperature} degrés à {ville}.",
    "Les anciens élèves du lycée {nom} se retrouvent le {date}.",
    "On a vu {prenom} {nom} sortir de l'église vers {heure}.",
    "Jusqu'à quand resterez-vous à {ville}, monsieur {nom} ?",
    "Lorsqu'il pleut, {prenom} préfère lire à la maison.",
    "La réunion du {date} est reportée à une date ultérieure.",
    "Un grand homme est né à {ville} en {annee}.",
    "C'est en {mois} que les arbres fleurissent à {ville}.",
    "L'hôtel {nom} propose {n_f} chambres à {prix} euros la nuit.",
    "« {slogan} » : voilà la devise de {prenom}.",
    "Le numéro {n} de la rue {nom} a été vendu en {annee}.",
    "Elles ont trouvé {n_f} erreurs dans le rapport de {prenom}.",
    "Nous étions {n} amis à fêter Noël chez {prenom}.",
    "{prenom} est né le {date} à {ville}, près de {ville2}.",
    "Prends le bus numéro {n} et descends au {ordinal} arrêt.",
    "Hélène et François ont acheté une maison à {ville} pour {milliers} euros.",
    "Je n'ai jamais su pourquoi {prenom} détestait {ville}.",
    "Le {couleur} n'est pas la couleur préférée de {prenom}.",
    "{prenom}, {metier} à {ville}, travaille ici depuis {age} ans.",
    "À {heure}, les enfants étaient déjà au lit.",
    "Où est-ce que {prenom} a rangé les clés de l'appartement ?",
    "Y a-t-il encore des places pour le concert du {date} ?",
    "L'œuvre de {prenom} {nom} a été exposée à {ville} en {annee}.",
    "{mots}",
)

# Everyday speech, as people say it: questions, requests, opinions, hesitations, negations with
# and without "ne", few numbers. Drawn for a share of the train split only
# (speech_data.synthetic.spoken_fraction), so the fine-tune's language model hears talk, not only
# the templates' dates and figures (issue 34: trained on those alone, it heard numbers in real
# speech). Written to stay clear of the real-voice set's telephone-prompt wording (no keys to
# press, no messages, no menus): that set measures, it is never a target.
SPOKEN = (
    "Tu crois que {prenom} va venir ce soir ?",
    "Je ne sais pas trop, il faut que j'en parle à {prenom}.",
    "Bon, on y va ou on attend encore un peu ?",
    "Franchement, je n'ai pas aimé ce film du tout.",
    "Tu pourrais me passer le {objet}, s'il te plaît ?",
    "Ça fait longtemps qu'on ne s'est pas vus, dis donc !",
    "Est-ce que vous savez où se trouve la gare de {ville} ?",
    "Il paraît que {prenom} a trouvé du travail comme {metier}.",
    "Attends, je reviens tout de suite, j'ai oublié mon {objet}.",
    "Moi, je préfère rester à la maison quand il pleut.",
    "On pourrait manger {plat} ce soir, qu'est-ce que tu en penses ?",
    "Je suis désolé, je n'ai pas bien compris ce que vous avez dit.",
    "C'est vrai que {ville} a beaucoup changé ces dernières années.",
    "Mais non, ce n'est pas du tout ce que je voulais dire !",
    "Tu as vu le temps qu'il fait ? On dirait que l'hiver arrive.",
    "Si j'avais su, je serais parti plus tôt.",
    "{prenom} m'a demandé si tu avais rendu le {objet}.",
    "Il faudrait qu'on se voie avant la fin de la semaine.",
    "Je me demande pourquoi elle n'a rien dit à personne.",
    "Vous voulez un café ou plutôt un thé ?",
    "Ne t'inquiète pas, tout va bien se passer.",
    "On s'est perdus en cherchant la maison de {prenom}.",
    "Ils ont décidé de déménager à {ville} pour se rapprocher de la mer.",
    "J'adore {activite}, mais je n'ai jamais le temps.",
    "Ce qui m'étonne, c'est qu'il n'ait pas encore répondu.",
    "Enfin bref, on en reparlera demain matin.",
    "Tu te souviens de {prenom}, le {metier} qui habitait en face ?",
    "Excusez-moi, est-ce que cette place est libre ?",
    "Elle a toujours rêvé de {activite} au bord du lac.",
    "Je crois qu'on a oublié d'acheter du pain.",
    "Pourquoi est-ce que tu ne me l'as pas dit plus tôt ?",
    "Le {objet} de ma grand-mère est encore dans le grenier.",
    "Au fond, je pense qu'il avait raison.",
    "Ça m'est égal, choisis ce que tu veux.",
    "Nous avons passé l'après-midi à {activite} avec les enfants.",
    "Tiens, regarde qui est là, c'est {prenom} !",
    "Je n'en reviens pas qu'ils aient vendu leur maison.",
    "Il faut absolument que tu goûtes {plat} de {prenom}.",
    "Quand j'étais petit, on allait souvent à {ville} en été.",
    "Vous pouvez parler un peu plus lentement, s'il vous plaît ?",
    "D'accord, mais alors on part de bonne heure.",
    "Je trouve que le {couleur} te va très bien.",
    "On a eu de la chance, le musée était presque vide.",
    "Il n'arrête pas de se plaindre depuis ce matin.",
    "Heureusement que {prenom} était là pour nous aider.",
    "Tu veux que je t'accompagne jusqu'à la gare ?",
    "J'ai l'impression qu'on tourne en rond.",
    "Le voisin a encore laissé son {objet} dans l'escalier.",
    "À mon avis, ça ne va pas durer longtemps.",
    "Qu'est-ce qui t'est arrivé ? Tu as l'air fatigué.",
    "Elle m'a raconté toute l'histoire en rentrant de {ville}.",
    "Ce n'est pas grave, on recommencera la prochaine fois.",
    "Dis-moi franchement ce que tu en penses.",
    "Je vais prendre {plat} et une carafe d'eau.",
    "Il a plu toute la nuit, le jardin est plein de boue.",
    "Mon frère est {metier}, il travaille beaucoup trop.",
    "On se retrouve devant le cinéma, comme d'habitude ?",
    "Ils ont mis des heures à trouver une place pour se garer.",
    "Je t'avais bien dit que ça finirait comme ça.",
    "Tu n'aurais pas vu mon {objet} quelque part ?",
)
# spoken openers, put before a share of SPOKEN sentences (more sentences from the same clauses)
_OPENERS = (
    "Bon", "Alors", "Tu sais", "Écoute", "Eh bien", "Au fait", "Bref", "Dis", "Oh",
    "En fait", "Du coup", "Sinon", "Remarque", "Voilà",
)  # fmt: skip
_OBJETS = (
    "parapluie", "manteau", "téléphone", "sac", "livre", "carnet", "vélo", "portefeuille",
    "piano", "fauteuil", "miroir", "chapeau", "stylo", "panier", "ordinateur", "tableau",
)  # fmt: skip
_PLATS = (
    "une soupe", "des crêpes", "une omelette", "un gratin", "une salade", "des pâtes",
    "une tarte aux pommes", "du poulet rôti", "une quiche", "des moules", "un couscous",
)  # fmt: skip
_ACTIVITES = (
    "faire du vélo", "lire", "jouer du piano", "nager", "marcher en forêt", "peindre",
    "faire la cuisine", "jardiner", "danser", "pêcher", "chanter", "dessiner",
)  # fmt: skip

_MONTHS = (
    "janvier",
    "février",
    "mars",
    "avril",
    "mai",
    "juin",
    "juillet",
    "août",
    "septembre",
    "octobre",
    "novembre",
    "décembre",
)
_DAYS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche")
_PLAIN = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿŒœ' -]+")  # no digits, parentheses, abbreviations
_ELIDE = re.compile(r"\b([dD]|[qQ]u)e ([AEIOUÉÈÊÂÎÔaeiouéèêâîô])")
_CAMEL = re.compile(r"[a-zà-ÿ][A-ZÀ-Ö]")  # Faker towns such as "BertinVille"


class _Filler:
    """Slot values for one sentence; numbers written with digits or in words at random."""

    def __init__(self, fake: Faker, rng: random.Random, digits_fraction: float) -> None:
        self.fake, self.rng, self.digits = fake, rng, digits_fraction

    def number(self, n: int, fem: bool = False) -> str:
        # with digits unless a feminine "un" would be lost ("21 chambres" reads "vingt et un")
        spelled = feminine(cardinal(str(n))) if fem else cardinal(str(n))
        if self.rng.random() < self.digits and spelled == cardinal(str(n)):
            return str(n)
        return spelled

    def plain(self, make, lower: bool = False) -> str:
        for _ in range(20):
            value = make()
            if _PLAIN.fullmatch(value) and not _CAMEL.search(value) and len(value) <= 30:
                return value.lower() if lower else value
        return "Paris"

    def date(self) -> str:
        day, month = self.rng.randint(1, 28), self.rng.choice(_MONTHS)
        year = self.number(self.rng.randint(1890, 2035))
        if day == 1:
            return f"{'1er' if self.rng.random() < self.digits else 'premier'} {month} {year}"
        return f"{self.number(day)} {month} {year}"

    def heure(self) -> str:
        h, m = self.rng.randint(1, 23), self.rng.choice((0, 0, 5, 10, 15, 20, 30, 45))
        if self.rng.random() < self.digits:
            return f"{h} h {m:02d}" if m else f"{h} h"
        hours = f"{feminine(cardinal(str(h)))} heure{'s' if h > 1 else ''}"
        return f"{hours} {cardinal(str(m))}" if m else hours

    def ordinal(self, low: int, high: int) -> str:
        n = self.rng.randint(low, high)
        if self.rng.random() < self.digits:
            return f"{n}er" if n == 1 else f"{n}e"
        return num2words(n, lang="fr", to="ordinal")

    def decimal(self) -> str:
        whole, frac = self.rng.randint(2, 42), self.rng.randint(1, 9)
        if self.rng.random() < self.digits:
            return f"{whole},{frac}"
        return f"{cardinal(str(whole))} virgule {cardinal(str(frac))}"

    def thousands(self) -> str:
        n = self.rng.randint(2, 900) * 1000 + self.rng.choice((0, 0, 500))
        if self.rng.random() < self.digits:
            return f"{n // 1000}\u202f{n % 1000:03d}"  # narrow no-break space, as in print
        return cardinal(str(n))

    def value(self, slot: str) -> str:
        f, rng = self.fake, self.rng
        makers = {
            "prenom": lambda: self.plain(f.first_name),
            "nom": lambda: self.plain(f.last_name),
            "ville": lambda: self.plain(f.city),
            "ville2": lambda: self.plain(f.city),
            "region": lambda: self.plain(f.region),
            "adresse": lambda: (
                self.number(rng.randint(2, 120)) + ", " + self.plain(f.street_name, lower=False)
            ),
            "metier": lambda: self.plain(f.job, lower=True),
            "slogan": lambda: self.plain(f.catch_phrase),
            "couleur": lambda: self.plain(f.color_name, lower=True),
            "mots": lambda: f.sentence(nb_words=rng.randint(4, 8)),
            "jour": lambda: rng.choice(_DAYS),
            "objet": lambda: rng.choice(_OBJETS),
            "plat": lambda: rng.choice(_PLATS),
            "activite": lambda: rng.choice(_ACTIVITES),
            "mois": lambda: rng.choice(_MONTHS),
            "date": self.date,
            "heure": self.heure,
            "annee": lambda: self.number(rng.randint(1890, 2035)),
            "age": lambda: self.number(rng.randint(2, 99)),
            "n": lambda: self.number(rng.randint(2, 99)),
            "n_f": lambda: self.number(rng.randint(2, 99), fem=True),
            "minutes": lambda: self.number(rng.randint(2, 59), fem=True),
            "score": lambda: self.number(rng.randint(1, 9)),
            "temperature": lambda: self.number(rng.randint(2, 39)),
            "prix": lambda: self.number(rng.randint(40, 400)),
            "pct": lambda: f"{self.number(rng.randint(2, 98))} %",
            "ordinal": lambda: self.ordinal(1, 30),
            "siecle": lambda: self.ordinal(12, 19),
            "decimal": self.decimal,
            "milliers": self.thousands,
        }
        return makers[slot]()


def _slots(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def french_sentences(
    n: int,
    seed: int,
    digits_fraction: float,
    templates: tuple[str, ...] = TEMPLATES,
    exclude: frozenset[str] = frozenset(),
) -> list[str]:
    """`n` distinct French sentences (distinct after `normalize`), in a seeded order.

    Args:
        digits_fraction: share of numbers written with digits ("12 mars") rather than in
            words ("douze mars"); both are said in words.
        templates: TEMPLATES (written for what is hard to transcribe) or SPOKEN (everyday talk).
        exclude: normalised sentences not to make (another split's).
    """
    rng = random.Random(seed)
    fake = Faker("fr_FR")
    fake.seed_instance(seed)
    filler = _Filler(fake, rng, digits_fraction)
    seen: set[str] = set()
    out: list[str] = []
    for _ in range(n * 20):  # duplicates are rare; the bound only guards against a loop
        template = rng.choice(templates)
        text = template.format(**{s: filler.value(s) for s in _slots(template)})
        if templates is SPOKEN:
            if not template.startswith("{") and rng.random() < 0.5:
                text = f"{rng.choice(_OPENERS)}, {text[0].lower()}{text[1:]}"
            text = _ELIDE.sub(r"\1'\2", text)  # "de Isabelle" -> "d'Isabelle"
        text = text[0].upper() + text[1:]
        key = normalize(text)
        if key not in seen and key not in exclude:
            seen.add(key)
            out.append(text)
            if len(out) == n:
                return out
    raise RuntimeError(f"only {len(out)} distinct sentences could be made, {n} were asked")
